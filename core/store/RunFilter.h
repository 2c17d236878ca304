#pragma once
// The run filter of `trainbench-cli runs --filter` and the History tab
// (internal to core/store): words, each FIELD OP VALUE, tag:NAME or free text,
// all of which must hold. A word that cannot be read is an InputError naming it.

#include <optional>
#include <string>
#include <vector>

#include "store/RunStore.h"
#include "store/Sqlite.h"

namespace tb::store_detail {

// One condition as SQL with its bound values (user text only ever reaches
// SQLite as a bound value). A status condition is checked on the run as read,
// whose status follows its owner's liveness, so it has no SQL.
struct FilterTerm {
    std::string sql;
    std::vector<std::string> texts; // bound in order; numbers are bound as numbers
    std::vector<bool> numeric;
    std::optional<RunStatus> status; // status=VALUE (or != with statusEquals false)
    bool statusEquals = true;
};

std::vector<FilterTerm> parseRunFilter(const std::string& filter, int schema);
// Binds the terms' values to a statement whose WHERE clause joined their SQL.
void bindFilter(Statement& s, const std::vector<FilterTerm>& terms);
// Whether a run (as read) meets the terms' status conditions.
bool statusMatches(const std::vector<FilterTerm>& terms, RunStatus status);

} // namespace tb::store_detail
