-- Settings' database at schema version 1, with data (made by termind, dumped with sqlite3 .dump).
-- Never edit: migrations of later versions are tested against it.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE termind_migrations (
    feature TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,
    checksum TEXT NOT NULL, applied_at TEXT NOT NULL,
    PRIMARY KEY (feature, version));
INSERT INTO termind_migrations VALUES('settings',1,'records, outbox, device','1e2a19c678ce7d52','2026-12-01T18:48:37.190Z');
CREATE TABLE settings_records (
    key TEXT PRIMARY KEY,
    value TEXT,
    revision INTEGER NOT NULL CHECK (revision >= 1),
    device_id TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
INSERT INTO settings_records VALUES('terminal.preferences','{"scrollbackLines":50000,"theme":"solarized"}',4,'74e3a0ff258174ada79dfae4d4cfa045','2026-12-01T18:49:52.485Z');
INSERT INTO settings_records VALUES('terminal.device',NULL,4,'74e3a0ff258174ada79dfae4d4cfa045','2026-12-01T18:48:44.052Z');
CREATE TABLE settings_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    revision INTEGER NOT NULL,
    tombstone INTEGER NOT NULL CHECK (tombstone IN (0, 1)),
    digest TEXT,
    device_id TEXT NOT NULL,
    at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
INSERT INTO settings_outbox VALUES(1,'terminal.preferences',1,0,'89f1cac013d3a401b1dc6a2bf7098a9727dccf2f9ca98e8b8d5b9e9c3ebc5953','74e3a0ff258174ada79dfae4d4cfa045','2026-12-01T18:48:37.283Z');
INSERT INTO settings_outbox VALUES(2,'terminal.preferences',2,0,'f3d1d4df48e0aa69787ea6e9cfe18343a2874894cdd22b79dcad83560adbc827','74e3a0ff258174ada79dfae4d4cfa045','2026-12-01T18:48:37.579Z');
INSERT INTO settings_outbox VALUES(3,'terminal.preferences',3,1,NULL,'74e3a0ff258174ada79dfae4d4cfa045','2026-12-01T18:49:52.421Z');
INSERT INTO settings_outbox VALUES(4,'terminal.preferences',4,0,'f3d1d4df48e0aa69787ea6e9cfe18343a2874894cdd22b79dcad83560adbc827','74e3a0ff258174ada79dfae4d4cfa045','2026-12-01T18:49:52.485Z');
CREATE TABLE settings_device (id TEXT NOT NULL);
INSERT INTO settings_device VALUES('74e3a0ff258174ada79dfae4d4cfa045');
COMMIT;
