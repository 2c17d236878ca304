#pragma once
// Saved hosts of remote runs: ssh destinations with the path of trainbench-cli
// and of the store there. One JSON file in the user's configuration folder,
// shared by trainbench-cli and the GUI.

#include <optional>
#include <string>
#include <vector>

namespace tb::remote {

struct Host {
    std::string name;        // the saved name; empty for a plain destination
    std::string destination; // an alias of ~/.ssh/config, host, user@host or user@host:port
    std::string remoteCli = "trainbench-cli"; // on the remote PATH unless a path
    std::string remoteDb;    // empty: the remote trainbench-cli's default store
    std::vector<std::string> sshOptions; // extra ssh arguments, e.g. {"-i", "KEY", "-o", "Port=2222"}
    // What the user calls it: the saved name, else the destination.
    std::string label() const { return name.empty() ? destination : name; }
};

class HostBook final {
public:
    // $TRAINBENCH_HOSTS, else $XDG_CONFIG_HOME/trainbench/hosts.json, else ~/.config/trainbench/hosts.json.
    static std::string defaultPath();
    // Reads the file (a missing file is an empty book). Throws InputError
    // naming the file and what is wrong with it.
    explicit HostBook(std::string path = defaultPath());

    const std::vector<Host>& hosts() const { return m_hosts; }
    std::optional<Host> find(const std::string& name) const;
    // Adds or, with `replace`, replaces; InputError for a bad name or a taken one.
    void add(const Host& host, bool replace);
    // InputError naming the saved hosts when there is no such host.
    void remove(const std::string& name);
    // Writes the whole file atomically.
    void save() const;
    const std::string& path() const { return m_path; }

private:
    std::string m_path;
    std::vector<Host> m_hosts;
};

// Checks a host name: letters, digits, '.', '-', '_'; InputError otherwise.
void checkHostName(const std::string& name);
// A destination as ssh takes it ("user@host:port" becomes "ssh://user@host:port").
// InputError for an empty one or one that starts with '-'.
std::string sshDestination(const std::string& destination);

// What --host names: a saved host, else a plain destination; --remote-cli and
// --remote-db (when not empty) override what is saved.
Host resolveHost(const std::string& nameOrDestination, const std::string& remoteCli, const std::string& remoteDb,
                 const HostBook& book);

} // namespace tb::remote
