#include "Command.h"

#include <algorithm>

#include "common/Errors.h"
#include "config/RunConfig.h"

namespace tb::cli {
namespace {

std::vector<Command>& registry()
{
    static std::vector<Command> all;
    return all;
}

} // namespace

CommandRegistration::CommandRegistration(Command command)
{
    auto& all = registry();
    all.push_back(std::move(command));
    std::sort(all.begin(), all.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
}

const std::vector<Command>& commands() { return registry(); }

std::string helpText(const Command& c)
{
    std::string text = "usage: trainbench-cli " + c.name + " " + c.usage + "\n\n" + c.summary + "\n";
    if (!c.options.empty()) text += "\noptions:\n";
    for (const auto& o : c.options) {
        std::string left = "  " + o.name + (o.takesValue ? " " + o.metavar : "");
        if (left.size() < 24) left.resize(24, ' ');
        else left += "  ";
        text += left + o.help + "\n";
    }
    text += "  --help                show this help\n";
    return text;
}

Args::Args(const std::string& command, const std::vector<OptionSpec>& specs, const std::vector<std::string>& argv)
    : m_command(command)
{
    std::vector<std::string> known;
    for (const auto& s : specs) known.push_back(s.name);
    for (std::size_t i = 0; i < argv.size(); ++i) {
        std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            m_help = true;
            continue;
        }
        if (arg.rfind("--", 0) != 0 || arg == "--") {
            m_positionals.push_back(arg);
            continue;
        }
        std::optional<std::string> inlineValue;
        if (const auto eq = arg.find('='); eq != std::string::npos) {
            inlineValue = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
        }
        const auto spec = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == arg; });
        if (spec == specs.end()) {
            std::string message = "unknown option " + arg + " for '" + command + "'";
            if (const auto guess = closestName(arg, known); !guess.empty()) message += "; did you mean " + guess + "?";
            throw InputError(message + " (see trainbench-cli " + command + " --help)");
        }
        if (!spec->takesValue) {
            if (inlineValue) throw InputError("option " + arg + " of '" + command + "' takes no value");
            m_flags[arg] = true;
            continue;
        }
        if (!inlineValue) {
            if (i + 1 >= argv.size()) {
                throw InputError("option " + arg + " of '" + command + "' needs a value (" + spec->metavar + ")");
            }
            inlineValue = argv[++i];
        }
        // An empty --db would silently mean the default database; an empty
        // --config, --output... nothing.
        if (inlineValue->empty() && !spec->allowEmpty) {
            throw InputError("option " + arg + " of '" + command + "' needs a non-empty value (" + spec->metavar + ")");
        }
        m_values[arg] = *inlineValue;
    }
}

std::optional<std::string> Args::value(const std::string& name) const
{
    const auto it = m_values.find(name);
    if (it == m_values.end()) return std::nullopt;
    return it->second;
}

std::optional<long long> Args::integer(const std::string& name, long long lo, long long hi) const
{
    const auto text = value(name);
    if (!text) return std::nullopt;
    std::size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(*text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text->size() || text->empty() || v < lo || v > hi) {
        throw InputError("option " + name + " must be an integer from " + std::to_string(lo) + " to "
                         + std::to_string(hi) + ", got \"" + *text + "\"");
    }
    return v;
}

long long Args::runId() const
{
    if (m_positionals.size() != 1) {
        throw InputError("'" + m_command + "' needs exactly one RUN_ID (see 'trainbench-cli runs' for the ids)");
    }
    return parseRunId(m_positionals[0]);
}

long long parseRunId(const std::string& text)
{
    std::size_t used = 0;
    long long id = 0;
    try {
        id = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || id <= 0) {
        throw InputError("RUN_ID must be a positive integer, got \"" + text.substr(0, 60) + "\"");
    }
    return id;
}

} // namespace tb::cli
