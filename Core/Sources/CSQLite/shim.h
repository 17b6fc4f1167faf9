#ifndef TERMIND_CSQLITE_SHIM_H
#define TERMIND_CSQLITE_SHIM_H
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type termind_sqlite_transient(void) { return SQLITE_TRANSIENT; }

// SQLITE_DBCONFIG_DEFENSIVE (a variadic call): no writable_schema, no corrupting pragmas.
static inline int termind_sqlite_defensive(sqlite3 *db) { return sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0); }
#endif
