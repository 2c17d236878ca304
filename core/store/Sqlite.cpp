#include "store/Sqlite.h"

#include <cstdio>

#include <sqlite3.h>

namespace tb {

Database::Database(const std::string& path, Mode mode) : m_path(path)
{
    int flags = mode == Mode::ReadWrite ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) : SQLITE_OPEN_READONLY;
    std::string name = path;
    if (mode == Mode::ReadOnlyImmutable) {
        // file: URI with the path percent-encoded where URI syntax needs it.
        name = "file:";
        for (const unsigned char c : path) {
            if (c == '%' || c == '?' || c == '#' || c < 0x20) {
                char hex[4];
                std::snprintf(hex, sizeof hex, "%%%02X", c);
                name += hex;
            } else {
                name += static_cast<char>(c);
            }
        }
        name += "?immutable=1";
        flags |= SQLITE_OPEN_URI;
    }
    const int rc = sqlite3_open_v2(name.c_str(), &m_db, flags | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        const std::string reason = m_db ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
        sqlite3_close(m_db);
        m_db = nullptr;
        throw StoreError("cannot open experiment database " + path + ": " + reason);
    }
    sqlite3_busy_timeout(m_db, 5000);
    sqlite3_extended_result_codes(m_db, 1);
}

Database::~Database()
{
    if (m_db) sqlite3_close_v2(m_db);
}

void Database::fail(const std::string& what) const
{
    const int code = sqlite3_errcode(m_db) & 0xff;
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED || code == SQLITE_FULL) {
        throw StoreBusyError("experiment database " + m_path + ": " + what + " failed: " + sqlite3_errmsg(m_db)
                             + (code == SQLITE_FULL ? "" : " (another process holds its write lock)"));
    }
    throw StoreError("experiment database " + m_path + ": " + what + " failed: " + sqlite3_errmsg(m_db));
}

void Database::exec(const std::string& sql)
{
    char* error = nullptr;
    if (sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
        const std::string message = error ? error : "unknown error";
        sqlite3_free(error);
        const int code = sqlite3_errcode(m_db) & 0xff;
        if (code == SQLITE_BUSY || code == SQLITE_LOCKED || code == SQLITE_FULL) {
            throw StoreBusyError("experiment database " + m_path + ": " + message
                                 + (code == SQLITE_FULL ? "" : " (another process holds its write lock)"));
        }
        throw StoreError("experiment database " + m_path + ": " + message);
    }
}

std::int64_t Database::lastInsertId() const { return sqlite3_last_insert_rowid(m_db); }
int Database::changes() const { return sqlite3_changes(m_db); }

Statement::Statement(Database& db, const char* sql) : m_db(db)
{
    if (sqlite3_prepare_v2(db.handle(), sql, -1, &m_stmt, nullptr) != SQLITE_OK) db.fail("preparing a query");
}

Statement::~Statement() { sqlite3_finalize(m_stmt); }

Statement& Statement::bind(int index, std::int64_t value)
{
    if (sqlite3_bind_int64(m_stmt, index, value) != SQLITE_OK) m_db.fail("binding a value");
    return *this;
}

Statement& Statement::bind(int index, double value)
{
    if (sqlite3_bind_double(m_stmt, index, value) != SQLITE_OK) m_db.fail("binding a value");
    return *this;
}

Statement& Statement::bind(int index, const std::string& value)
{
    if (sqlite3_bind_text(m_stmt, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT) != SQLITE_OK) {
        m_db.fail("binding a value");
    }
    return *this;
}

Statement& Statement::bindNull(int index)
{
    if (sqlite3_bind_null(m_stmt, index) != SQLITE_OK) m_db.fail("binding a value");
    return *this;
}

bool Statement::step()
{
    const int rc = sqlite3_step(m_stmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    m_db.fail("a query");
}

void Statement::run()
{
    while (step()) {
    }
    reset();
}

void Statement::reset()
{
    sqlite3_reset(m_stmt);
    sqlite3_clear_bindings(m_stmt);
}

std::int64_t Statement::columnInt(int index) const { return sqlite3_column_int64(m_stmt, index); }
double Statement::columnDouble(int index) const { return sqlite3_column_double(m_stmt, index); }
bool Statement::columnIsNull(int index) const { return sqlite3_column_type(m_stmt, index) == SQLITE_NULL; }

std::string Statement::columnText(int index) const
{
    const auto* text = sqlite3_column_text(m_stmt, index);
    return text ? std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(m_stmt, index)) : std::string();
}

Transaction::Transaction(Database& db) : m_db(db) { m_db.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction()
{
    if (!m_done) {
        try {
            m_db.exec("ROLLBACK");
        } catch (...) {
            // Nothing more to do: the connection reports the original error.
        }
    }
}

void Transaction::commit()
{
    m_db.exec("COMMIT");
    m_done = true;
}

} // namespace tb
