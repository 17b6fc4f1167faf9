import TermindStore

/// The Vault's tables in the process database. Append-only: a change is a new migration.
enum VaultSchema {
    static let schema = Schema(feature: "vault", migrations: [
        Migration(1, "hosts, identities, snippets, known hosts", """
            CREATE TABLE vault_identities (
                id TEXT PRIMARY KEY,
                label TEXT NOT NULL,
                username TEXT NOT NULL,
                password_handle TEXT,
                key_id TEXT,
                created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            CREATE UNIQUE INDEX vault_identities_label ON vault_identities (label COLLATE NOCASE);
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
                updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            CREATE UNIQUE INDEX vault_hosts_label ON vault_hosts (label COLLATE NOCASE);
            CREATE INDEX vault_hosts_identity ON vault_hosts (identity_id);
            CREATE TABLE vault_known_hosts (
                id TEXT PRIMARY KEY,
                line TEXT NOT NULL UNIQUE,
                created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            CREATE TABLE vault_snippets (
                id TEXT PRIMARY KEY,
                label TEXT NOT NULL,
                body TEXT NOT NULL,
                created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            """),
        Migration(2, "ssh keys", """
            CREATE TABLE vault_keys (
                id TEXT PRIMARY KEY,
                label TEXT NOT NULL,
                algorithm TEXT NOT NULL,
                bits INTEGER NOT NULL,
                fingerprint TEXT NOT NULL,
                public_key TEXT NOT NULL,
                private_handle TEXT NOT NULL,
                created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            CREATE UNIQUE INDEX vault_keys_label ON vault_keys (label COLLATE NOCASE);
            CREATE INDEX vault_identities_key ON vault_identities (key_id);
            """),
        Migration(3, "workspaces; agent forwarding per host", """
            ALTER TABLE vault_hosts ADD COLUMN forward_agent INTEGER NOT NULL DEFAULT 0;
            CREATE TABLE vault_workspaces (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                layout TEXT NOT NULL,
                created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
            CREATE UNIQUE INDEX vault_workspaces_name ON vault_workspaces (name COLLATE NOCASE);
            """),
        // Sync's journal: every change of a synced entity, written by the same transaction as
        // the change (VaultJournal; the kernel allows a feature no triggers), read and
        // dropped by sync.
        Migration(4, "sync journal", """
            CREATE TABLE vault_sync_outbox (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                kind TEXT NOT NULL,
                id TEXT NOT NULL,
                at INTEGER NOT NULL);
            """),
    ])
}
