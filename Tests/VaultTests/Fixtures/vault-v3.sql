-- The Vault's database at schema version 3, with data (made by termind: the v2 fixture migrated by the Vault, agent forwarding turned on for
-- gpu-box and a workspace saved; then the tables of other features and of later Vault migrations removed and their migration rows with them;
-- dumped with sqlite3 .dump). Never edit: migrations of later versions are tested against it.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE termind_migrations (
    feature TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,
    checksum TEXT NOT NULL, applied_at TEXT NOT NULL,
    PRIMARY KEY (feature, version));
INSERT INTO termind_migrations VALUES('vault',1,'hosts, identities, snippets, known hosts','55050c113e74d7a3','2026-11-30T15:23:08.372Z');
INSERT INTO termind_migrations VALUES('vault',2,'ssh keys','d46e4740431c474b','2026-12-02T12:30:52.486Z');
INSERT INTO termind_migrations VALUES('vault',3,'workspaces; agent forwarding per host','6f47d7210ff258a4','2026-12-06T16:29:31.742Z');
CREATE TABLE vault_identities (
    id TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    username TEXT NOT NULL,
    password_handle TEXT,
    key_id TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
INSERT INTO vault_identities VALUES('ident_781eee9cf346','deploy','deploy',NULL,'key_5909cd4b0ece','2026-11-30T15:23:08.403Z','2026-12-02T12:30:52.651Z');
CREATE TABLE vault_hosts (
    id TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    address TEXT NOT NULL,
    port INTEGER NOT NULL DEFAULT 22 CHECK (port BETWEEN 1 AND 65535),
    user TEXT,
    identity_id TEXT REFERENCES vault_identities (id) ON DELETE RESTRICT,
    jump TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    shell_integration TEXT NOT NULL DEFAULT 'default' CHECK (shell_integration IN ('default', 'enabled', 'disabled')),
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), forward_agent INTEGER NOT NULL DEFAULT 0);
INSERT INTO vault_hosts VALUES('host_ce52cdebcf84','10.0.0.5','10.0.0.5',2222,NULL,NULL,'[]','["gpu","mac=00:11:22:33:44:55"]','default','2026-11-30T15:23:08.375Z','2026-11-30T15:23:08.375Z',0);
INSERT INTO vault_hosts VALUES('host_c3e77b53dce6','gpu-box','gpu.example.com',22,NULL,'ident_781eee9cf346','["host_ce52cdebcf84"]','[]','enabled','2026-11-30T15:23:08.431Z','2026-12-06T16:29:31.796Z',1);
CREATE TABLE vault_known_hosts (
    id TEXT PRIMARY KEY,
    line TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
INSERT INTO vault_known_hosts VALUES('kh_dac389e26239','gpu.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKiE3yPq7cocKGlPu/tuOYsWcpIIlsndyUaBl/wV3SmW','2026-11-30T15:23:08.491Z');
CREATE TABLE vault_snippets (
    id TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
INSERT INTO vault_snippets VALUES('snip_14515e6375a5','nvidia-smi','nvidia-smi','2026-11-30T15:23:08.456Z','2026-11-30T15:23:08.456Z');
CREATE TABLE vault_keys (
    id TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    bits INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    public_key TEXT NOT NULL,
    private_handle TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
INSERT INTO vault_keys VALUES('key_5909cd4b0ece','fixture-key','ssh-ed25519',256,'SHA256:jWsFl10KO+gfEgNQZq1SCbnlhQI6vsExLjSp3T4mFjM','ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOq6iRytqiEvfyVa+WWMIbmo7o+rFZNQ8QGA0loU5oLv fixture','sec_923c599931f6b1ed970c803873914ba4','2026-12-02T12:30:52.574Z');
CREATE TABLE vault_workspaces (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    layout TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
INSERT INTO vault_workspaces VALUES('ws_b5b0fcea77cd','fixture-pair','{"pane":{"host":"host_c3e77b53dce6","kind":"ssh"}}','2026-12-06T16:29:37.048Z','2026-12-06T16:29:37.048Z');
CREATE UNIQUE INDEX vault_identities_label ON vault_identities (label COLLATE NOCASE);
CREATE UNIQUE INDEX vault_hosts_label ON vault_hosts (label COLLATE NOCASE);
CREATE INDEX vault_hosts_identity ON vault_hosts (identity_id);
CREATE UNIQUE INDEX vault_keys_label ON vault_keys (label COLLATE NOCASE);
CREATE INDEX vault_identities_key ON vault_identities (key_id);
CREATE UNIQUE INDEX vault_workspaces_name ON vault_workspaces (name COLLATE NOCASE);
COMMIT;
