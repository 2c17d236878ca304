#pragma once
// The subcommand registry of trainbench-cli and the option parser they share.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tb::cli {

struct OptionSpec {
    std::string name; // "--db"
    bool takesValue = true;
    std::string help;
    std::string metavar = "VALUE";
    bool allowEmpty = false; // an empty value is refused unless this is set
};

// Parsed arguments of one subcommand. Unknown options and missing values are
// InputErrors naming the option and pointing at --help.
class Args final {
public:
    Args(const std::string& command, const std::vector<OptionSpec>& specs, const std::vector<std::string>& argv);
    std::optional<std::string> value(const std::string& name) const;
    bool flag(const std::string& name) const { return m_flags.count(name) > 0; }
    const std::vector<std::string>& positionals() const { return m_positionals; }
    bool helpRequested() const { return m_help; }
    // Integer option with a range check; nullopt when absent.
    std::optional<long long> integer(const std::string& name, long long lo, long long hi) const;
    // The single RUN_ID positional.
    long long runId() const;

private:
    std::string m_command;
    std::map<std::string, std::string> m_values;
    std::map<std::string, bool> m_flags;
    std::vector<std::string> m_positionals;
    bool m_help = false;
};

// "3" -> 3; InputError naming the argument otherwise.
long long parseRunId(const std::string& text);

struct Command {
    std::string name;
    std::string summary;
    std::string usage; // after "trainbench-cli NAME "
    std::vector<OptionSpec> options;
    int (*run)(const Args& args) = nullptr;
    // Positional arguments it accepts; -1: one when the usage starts with
    // RUN_ID, else none. The command checks the exact count itself.
    int positionals = -1;
};

// Each cmd_*.cpp holds one `static const CommandRegistration r{Command{...}};`.
struct CommandRegistration {
    explicit CommandRegistration(Command command);
};

const std::vector<Command>& commands();
std::string helpText(const Command& command);

// Exit codes of trainbench-cli.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadInput = 2;
// preflight (and a train it blocks): a finding is an error.
inline constexpr int kExitFindings = 3;
inline constexpr int kExitCancelled = 130;

// Bytes in MiB, as estimate and measure print them.
inline double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

} // namespace tb::cli
