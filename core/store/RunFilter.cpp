#include "store/RunFilter.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>

#include "config/RunConfig.h"
#include "store/StoreSchema.h"

namespace tb::store_detail {
namespace {

// A number as written in a filter ("2.5", "-1", "1e-3", "+3"), whatever the
// process's locale: the GUI's QApplication sets LC_NUMERIC from the
// environment, where strtod would want "2,5".
bool readNumber(const std::string& text, double& out)
{
    const char* begin = text.data();
    const char* end = text.data() + text.size();
    if (begin != end && *begin == '+') ++begin;
    if (begin == end) return false;
    const auto [ptr, ec] = std::from_chars(begin, end, out);
    return ec == std::errc() && ptr == end && std::isfinite(out);
}

std::string shown(const std::string& text) { return text.size() > 60 ? text.substr(0, 57) + "..." : text; }

struct Word {
    std::string text;
    bool quoted = false; // it had double quotes: operators inside them are text
};

// Splits at spaces outside double quotes; quotes group, and are removed.
std::vector<Word> filterWords(const std::string& filter)
{
    std::vector<Word> words;
    Word word;
    bool quoted = false, any = false;
    for (char c : filter) {
        if (c == '"') {
            quoted = !quoted;
            word.quoted = true;
            any = true;
        } else if (!quoted && std::isspace(static_cast<unsigned char>(c))) {
            if (any) words.push_back(word);
            word = {};
            any = false;
        } else {
            word.text += c;
            any = true;
        }
    }
    if (quoted) throw InputError("filter: a double quote is not closed");
    if (any) words.push_back(word);
    return words;
}

struct Column {
    const char* name;
    const char* sql;
    bool numeric;
};
constexpr Column kColumns[] = {{"id", "id", true},
                               {"name", "name", false},
                               {"status", "status", false},
                               {"device", "device", false},
                               {"precision", "precision", false},
                               {"steps", "steps_done", true},
                               {"loss", kShownLossSql, true}, // as `runs` and History show it
                               {"val_loss", "final_val_loss", true},
                               {"note", "note", false}};

bool isOrdering(const std::string& op) { return op != "=" && op != "!="; }

FilterTerm sqlTerm(std::string sql, std::vector<std::string> texts, std::vector<bool> numeric)
{
    FilterTerm t;
    t.sql = std::move(sql);
    t.texts = std::move(texts);
    t.numeric = std::move(numeric);
    return t;
}

FilterTerm filterTerm(const Word& w, int schema)
{
    const std::string& word = w.text;
    if (word.rfind("tag:", 0) == 0) {
        if (word.size() == 4) throw InputError("filter: \"tag:\" needs a tag name, e.g. tag:baseline");
        if (schema < 4) return sqlTerm("(? IS NULL)", {word.substr(4)}, {false}); // no tags before schema 4
        return sqlTerm("EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = runs.id AND t.tag = ?)", {word.substr(4)}, {false});
    }
    if (word.rfind("sweep:", 0) == 0) {
        const std::string id = word.substr(6);
        if (id.empty() || id.size() > 18 || id.find_first_not_of("0123456789") != std::string::npos) {
            throw InputError("filter: \"sweep:\" needs a sweep's number, e.g. sweep:3");
        }
        if (schema < 8) return sqlTerm("(? IS NULL)", {id}, {true}); // no sweeps before schema 8
        return sqlTerm("EXISTS (SELECT 1 FROM sweep_trials t WHERE t.run_id = runs.id AND t.sweep_id = ?)", {id}, {true});
    }
    // FIELD OP VALUE, the operator being the first of these found.
    static const char* const kOps[] = {">=", "<=", "!=", "=", "<", ">"};
    std::size_t at = std::string::npos, length = 0;
    std::string op;
    for (const char* candidate : kOps) {
        const auto pos = word.find(candidate);
        if (pos != std::string::npos && (pos < at || (pos == at && std::strlen(candidate) > length))) {
            at = pos;
            length = std::strlen(candidate);
            op = candidate;
        }
    }
    if (at == std::string::npos) {
        // Free text: in the name or the note.
        std::string like = "%";
        for (char c : word) {
            if (c == '%' || c == '_' || c == '\\') like += '\\';
            like += c;
        }
        like += '%';
        if (schema < 4) return sqlTerm("(name LIKE ? ESCAPE '\\' OR '' LIKE ?)", {like, like}, {false, false});
        return sqlTerm("(name LIKE ? ESCAPE '\\' OR note LIKE ? ESCAPE '\\')", {like, like}, {false, false});
    }
    const std::string field = word.substr(0, at), value = word.substr(at + length);
    const std::string quoted = "filter: \"" + shown(word) + "\"";
    if (field.empty()) throw InputError(quoted + " has no field before " + op);
    const auto* known = std::find_if(std::begin(kColumns), std::end(kColumns), [&](const Column& c) { return field == c.name; });
    const bool textColumn = known != std::end(kColumns) && !known->numeric && field != "status";
    if (value.empty() && !(textColumn && !isOrdering(op))) {
        throw InputError(quoted + " has no value after " + op
                         + (textColumn ? "" : " (only name, note, device and precision match an empty value: note=)"));
    }
    if (!value.empty() && !w.quoted && std::strchr("<>=!", value.front())) {
        throw InputError(quoted + " is not FIELD OP VALUE: a second operator follows " + op
                         + " (write e.g. loss<2.5 or lr>=0.001)");
    }
    double number = 0;
    const bool isNumber = readNumber(value, number);
    const bool ordering = isOrdering(op);
    const std::string sqlOp = op == "!=" ? "IS NOT" : op == "=" ? "IS" : op;
    if (known != std::end(kColumns)) {
        const Column& column = *known;
        if (column.numeric && !isNumber) {
            throw InputError(quoted + " compares " + field + " with \"" + shown(value) + "\", which is not a number");
        }
        if (field == "status") {
            if (ordering) throw InputError(quoted + ": a status is matched with = or !=, not " + op);
            for (auto s : {RunStatus::Created, RunStatus::Running, RunStatus::Finished, RunStatus::Failed,
                           RunStatus::Cancelled, RunStatus::Interrupted}) {
                if (runStatusName(s) != value) continue;
                auto t = sqlTerm("1", {}, {});
                t.status = s;
                t.statusEquals = op == "=";
                return t;
            }
            throw InputError(quoted + ": unknown status \"" + shown(value)
                             + "\"; use created, running, finished, failed, cancelled or interrupted");
        }
        std::string sqlColumn = std::string(column.name) == "note" && schema < 4 ? "''" : column.sql;
        if (!column.numeric) sqlColumn = "COALESCE(" + sqlColumn + ", '')"; // no note matches note=
        return sqlTerm(sqlColumn + " " + sqlOp + " ?", {value}, {column.numeric});
    }
    // A config field by its dotted path, as in the config file.
    const auto& paths = configFieldPaths();
    if (std::find(paths.begin(), paths.end(), field) == paths.end()) {
        if (field.find('.') == std::string::npos) {
            throw InputError(quoted + ": unknown field \"" + shown(field)
                             + "\"; use id, name, status, device, precision, steps, loss, val_loss, note, tag:NAME, "
                               "sweep:N or a config path such as train.batch_size");
        }
        std::string hint;
        if (const auto guess = closestName(field, paths); !guess.empty()) {
            hint = "; did you mean " + guess + "?";
        } else {
            // The section's own fields, when the section exists.
            const std::string section = field.substr(0, field.rfind('.') + 1);
            for (const auto& p : paths) {
                if (p.rfind(section, 0) == 0) hint += (hint.empty() ? "; " + section.substr(0, section.size() - 1) + " has " : ", ") + p.substr(section.size());
            }
            if (hint.empty()) hint = "; config paths look like optim.lr or train.batch_size";
        }
        throw InputError(quoted + ": no config has the field \"" + shown(field) + "\"" + hint);
    }
    if (ordering && !isNumber) {
        throw InputError(quoted + " compares " + field + " with \"" + shown(value) + "\", which is not a number");
    }
    // (A row whose stored config is not JSON matches nothing, and breaks nothing.)
    const std::string stored = "(CASE WHEN json_valid(config_json) THEN json_extract(config_json, ?) END)";
    const std::string path = "$." + field;
    if (!ordering && (value == "true" || value == "false")) {
        // JSON booleans come out of json_extract as 1 and 0.
        return sqlTerm(stored + " " + sqlOp + " ?", {path, value == "true" ? "1" : "0"}, {false, true});
    }
    if (!ordering && isNumber) {
        // 12 matches the number 12 and the text "12" (a path or a name may look like a number).
        const std::string join = op == "=" ? " OR " : " AND ";
        return sqlTerm("(" + stored + " " + sqlOp + " ?" + join + stored + " " + sqlOp + " ?)", {path, value, path, value},
                       {false, true, false, false});
    }
    return sqlTerm(stored + " " + sqlOp + " ?", {path, value}, {false, isNumber});
}

} // namespace

std::vector<FilterTerm> parseRunFilter(const std::string& filter, int schema)
{
    std::vector<FilterTerm> terms;
    for (const auto& word : filterWords(filter)) terms.push_back(filterTerm(word, schema));
    return terms;
}

void bindFilter(Statement& s, const std::vector<FilterTerm>& terms)
{
    int index = 1;
    for (const auto& t : terms) {
        for (std::size_t i = 0; i < t.texts.size(); ++i) {
            double number = 0;
            if (t.numeric[i] && readNumber(t.texts[i], number)) s.bind(index++, number);
            else s.bind(index++, t.texts[i]);
        }
    }
}

bool statusMatches(const std::vector<FilterTerm>& terms, RunStatus status)
{
    for (const auto& t : terms) {
        if (t.status && (status == *t.status) != t.statusEquals) return false;
    }
    return true;
}

} // namespace tb::store_detail
