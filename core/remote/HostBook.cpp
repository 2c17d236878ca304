#include "remote/HostBook.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "common/Files.h"

namespace tb::remote {

std::string HostBook::defaultPath()
{
    if (const char* explicitPath = std::getenv("TRAINBENCH_HOSTS"); explicitPath && *explicitPath) return explicitPath;
    if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) return std::string(xdg) + "/trainbench/hosts.json";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.config/trainbench/hosts.json";
}

void checkHostName(const std::string& name)
{
    const bool ok = !name.empty() && name.size() <= 64 && name.front() != '-'
        && std::all_of(name.begin(), name.end(), [](unsigned char c) {
               return std::isalnum(c) || c == '.' || c == '-' || c == '_';
           });
    if (!ok) {
        throw InputError("host name \"" + name + "\" is not usable: use 1 to 64 letters, digits, '.', '-' or '_', "
                         "not starting with '-'");
    }
}

std::string sshDestination(const std::string& destination)
{
    if (destination.empty()) throw InputError("the ssh destination is empty: give an alias, HOST or USER@HOST[:PORT]");
    if (destination.front() == '-') {
        throw InputError("ssh destination \"" + destination + "\" starts with '-': give an alias, HOST or USER@HOST[:PORT]");
    }
    if (destination.find_first_of(" \t\n'\"") != std::string::npos) {
        throw InputError("ssh destination \"" + destination + "\" has spaces or quotes: give an alias, HOST or USER@HOST[:PORT]");
    }
    if (destination.rfind("ssh://", 0) == 0) return destination;
    // user@host:port is not a form ssh reads; its URI form is.
    const auto colon = destination.rfind(':');
    if (colon != std::string::npos && destination.find(':') == colon && colon + 1 < destination.size()
        && destination.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
        return "ssh://" + destination;
    }
    return destination;
}

HostBook::HostBook(std::string path) : m_path(std::move(path))
{
    std::ifstream in(m_path);
    if (!in) return;
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text.str());
    } catch (const std::exception& e) {
        throw InputError(m_path + " is not valid JSON (" + e.what() + "): fix it or remove it to start an empty host list");
    }
    const auto bad = [&](const std::string& what) {
        return InputError(m_path + ": " + what + "; fix it or remove the entry with 'trainbench-cli hosts remove'");
    };
    if (!j.is_object() || !j.contains("hosts") || !j["hosts"].is_array()) throw bad("expected {\"hosts\": [...]}");
    for (const auto& h : j["hosts"]) {
        if (!h.is_object() || !h.contains("name") || !h["name"].is_string() || !h.contains("destination")
            || !h["destination"].is_string()) {
            throw bad("every host needs a \"name\" and a \"destination\" (strings)");
        }
        Host host;
        host.name = h["name"].get<std::string>();
        host.destination = h["destination"].get<std::string>();
        if (h.contains("remote_cli") && h["remote_cli"].is_string() && !h["remote_cli"].get<std::string>().empty()) {
            host.remoteCli = h["remote_cli"].get<std::string>();
        }
        if (h.contains("remote_db") && h["remote_db"].is_string()) host.remoteDb = h["remote_db"].get<std::string>();
        if (h.contains("ssh_options")) {
            if (!h["ssh_options"].is_array()) throw bad("host \"" + host.name + "\": \"ssh_options\" must be a list of strings");
            for (const auto& o : h["ssh_options"]) {
                if (!o.is_string()) throw bad("host \"" + host.name + "\": \"ssh_options\" must be a list of strings");
                host.sshOptions.push_back(o.get<std::string>());
            }
        }
        m_hosts.push_back(std::move(host));
    }
}

std::optional<Host> HostBook::find(const std::string& name) const
{
    for (const auto& h : m_hosts) {
        if (h.name == name) return h;
    }
    return std::nullopt;
}

void HostBook::add(const Host& host, bool replace)
{
    checkHostName(host.name);
    sshDestination(host.destination);
    for (auto& h : m_hosts) {
        if (h.name != host.name) continue;
        if (!replace) {
            throw InputError("a host named \"" + host.name + "\" is already saved (" + h.destination
                             + "): choose another name, or add --replace");
        }
        h = host;
        return;
    }
    m_hosts.push_back(host);
}

void HostBook::remove(const std::string& name)
{
    const auto it = std::find_if(m_hosts.begin(), m_hosts.end(), [&](const Host& h) { return h.name == name; });
    if (it == m_hosts.end()) {
        std::string names;
        for (const auto& h : m_hosts) {
            if (!names.empty()) names += ", ";
            names += h.name;
        }
        throw InputError("no saved host named \"" + name + "\" (saved: " + (names.empty() ? "none" : names) + ")");
    }
    m_hosts.erase(it);
}

void HostBook::save() const
{
    auto list = nlohmann::json::array();
    for (const auto& h : m_hosts) {
        nlohmann::json j = {{"name", h.name}, {"destination", h.destination}, {"remote_cli", h.remoteCli}};
        if (!h.remoteDb.empty()) j["remote_db"] = h.remoteDb;
        if (!h.sshOptions.empty()) j["ssh_options"] = h.sshOptions;
        list.push_back(std::move(j));
    }
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(m_path).parent_path(), ec);
    const auto error = writeFileAtomically(m_path, nlohmann::json{{"hosts", list}}.dump(2) + "\n");
    if (!error.empty()) throw InputError("cannot save the host list: " + error);
}

Host resolveHost(const std::string& nameOrDestination, const std::string& remoteCli, const std::string& remoteDb,
                 const HostBook& book)
{
    Host host;
    if (auto saved = book.find(nameOrDestination)) {
        host = *saved;
    } else {
        host.destination = nameOrDestination;
        sshDestination(host.destination);
    }
    if (!remoteCli.empty()) host.remoteCli = remoteCli;
    if (!remoteDb.empty()) host.remoteDb = remoteDb;
    return host;
}

} // namespace tb::remote
