#pragma once
// Small RAII wrappers over the SQLite C API. Every value that reaches SQL
// goes through bind(): no string-built statements with user data.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/Errors.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tb {

// A database the user pointed us at cannot be used (not SQLite, read-only,
// newer schema...): reported like any other bad input.
class StoreError : public InputError {
public:
    using InputError::InputError;
};

// The database is there and fine, but another connection holds its write
// lock for longer than we waited (SQLITE_BUSY), or the disk is full: not bad
// input, and worth retrying.
class StoreBusyError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Database final {
public:
    // ReadOnlyImmutable: read a file that no one may change while we read it
    // (no locks, no -shm): for WAL databases in folders we cannot write.
    enum class Mode { ReadWrite, ReadOnly, ReadOnlyImmutable };
    // Throws StoreError (for a bad path) with a message naming the file.
    Database(const std::string& path, Mode mode);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    void exec(const std::string& sql);
    sqlite3* handle() const { return m_db; }
    const std::string& path() const { return m_path; }
    std::int64_t lastInsertId() const;
    // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
    int changes() const;
    [[noreturn]] void fail(const std::string& what) const;

private:
    sqlite3* m_db = nullptr;
    std::string m_path;
};

class Statement final {
public:
    Statement(Database& db, const char* sql);
    ~Statement();
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind(int index, std::int64_t value);
    Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
    Statement& bind(int index, double value);
    Statement& bind(int index, const std::string& value);
    Statement& bindNull(int index);
    template <typename T>
    Statement& bind(int index, const std::optional<T>& value)
    {
        return value ? bind(index, *value) : bindNull(index);
    }

    // Returns true while rows remain.
    bool step();
    // step() for statements that return nothing; then reset for reuse.
    void run();
    void reset();

    std::int64_t columnInt(int index) const;
    double columnDouble(int index) const;
    std::string columnText(int index) const;
    bool columnIsNull(int index) const;

private:
    Database& m_db;
    sqlite3_stmt* m_stmt = nullptr;
};

// Runs `write` until it does not throw StoreBusyError, sleeping with doubling
// waits (from `firstWait` up to 2 s) in between; rethrows after `giveUp`.
template <typename Write>
void retryWhileBusy(Write&& write, std::chrono::milliseconds giveUp,
                    std::chrono::milliseconds firstWait = std::chrono::milliseconds(100))
{
    const auto deadline = std::chrono::steady_clock::now() + giveUp;
    for (auto wait = firstWait;; wait = std::min(wait * 2, std::chrono::milliseconds(2000))) {
        try {
            write();
            return;
        } catch (const StoreBusyError&) {
            if (std::chrono::steady_clock::now() >= deadline) throw;
            std::this_thread::sleep_for(wait);
        }
    }
}

// BEGIN IMMEDIATE ... COMMIT, rolled back if not committed.
class Transaction final {
public:
    explicit Transaction(Database& db);
    ~Transaction();
    void commit();

private:
    Database& m_db;
    bool m_done = false;
};

} // namespace tb
