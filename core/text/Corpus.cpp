#include "text/Corpus.h"

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>

#include "common/Errors.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace tb::text {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kFormatVersion = 1;
constexpr std::size_t kBlock = 8u << 20;              // bytes read at a time
constexpr std::size_t kMaxDocument = 256u << 20;      // one document (a paragraph, a JSON line)
constexpr std::size_t kHeadBytes = 1u << 20;          // hashed into the key
constexpr std::size_t kSkippedExamples = 5;

struct Fnv {
    std::uint64_t h = 1469598103934665603ull;
    void add(const void* data, std::size_t n)
    {
        const auto* p = static_cast<const unsigned char*>(data);
        for (std::size_t i = 0; i < n; ++i) {
            h ^= p[i];
            h *= 1099511628211ull;
        }
    }
    void add(const std::string& s)
    {
        add(s.data(), s.size());
        add("\0", 1);
    }
    std::string hex() const
    {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
        return buf;
    }
};

struct FileCloser {
    void operator()(std::FILE* f) const
    {
        if (f) std::fclose(f);
    }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// Buffered little-endian writer of fixed-width values.
class Writer {
public:
    Writer(const std::string& path, const std::string& what) : m_path(path), m_what(what)
    {
        m_file.reset(std::fopen(path.c_str(), "wb"));
        if (!m_file) throw RunError("cannot write the token cache " + path);
        m_buffer.reserve(kBlock);
    }
    template <typename T>
    void put(T v)
    {
        const auto* p = reinterpret_cast<const char*>(&v); // little-endian hosts only (x86-64, aarch64)
        m_buffer.insert(m_buffer.end(), p, p + sizeof(T));
        if (m_buffer.size() >= kBlock) flush();
    }
    void flush()
    {
        if (!m_buffer.empty() && std::fwrite(m_buffer.data(), 1, m_buffer.size(), m_file.get()) != m_buffer.size())
            throw RunError("cannot write the token cache " + m_path + " (is the disk full?)");
        m_buffer.clear();
    }
    void close()
    {
        flush();
        if (std::fflush(m_file.get()) != 0 || std::fclose(m_file.release()) != 0)
            throw RunError("cannot write the token cache " + m_path + " (is the disk full?)");
    }

private:
    std::string m_path, m_what;
    File m_file;
    std::vector<char> m_buffer;
};

std::string jsonTypeName(const json& j)
{
    return j.is_number() ? "a number" : j.is_boolean() ? "true/false" : j.is_null() ? "null" : j.is_array() ? "an array" : j.is_object() ? "an object" : "a string";
}

bool blank(std::string_view line)
{
    for (const char c : line)
        if (c != ' ' && c != '\t' && c != '\r') return false;
    return true;
}

using ojson = nlohmann::ordered_json;

const std::string kOpen = "\xEE\x80\x80";  // U+E000, around assistant text while locating it
const std::string kClose = "\xEE\x80\x81"; // U+E001

// BOS first when the tokenizer's own template adds one and the chat template did not write it.
void prependBos(std::vector<std::int32_t>& ids, const Tokenizer& tok, std::int32_t bos)
{
    if (bos < 0 || (!ids.empty() && ids.front() == bos)) return;
    const auto probe = tok.encode("", true);
    if (!probe.empty() && probe.front() == bos) ids.insert(ids.begin(), bos);
}

// How many leading ids of `whole` the ids of a prefix of its text share.
std::size_t sharedPrefix(const std::vector<std::int32_t>& whole, const std::vector<std::int32_t>& prefix)
{
    std::size_t n = 0;
    while (n < whole.size() && n < prefix.size() && whole[n] == prefix[n]) ++n;
    return n;
}

// The cache entry's name: everything that decides its tokens (the
// tokenizer's content, the format and its options, and the file's path,
// size, modification time and first MiB).
std::string cacheKey(const CorpusSpec& spec, const Tokenizer& tok, const fs::path& path, std::uint64_t size,
                     std::uint64_t mtimeNs, const std::string& head)
{
    Fnv key;
    key.add("trainbench token cache " + std::to_string(kFormatVersion));
    key.add(tok.contentHash());
    key.add(spec.format);
    key.add(spec.format == "jsonl" ? spec.field : "");
    key.add(spec.skipBadLines ? "skip" : "stop");
    key.add(std::to_string(spec.eos));
    key.add(std::to_string(spec.bos));
    key.add(spec.format == "chat" ? spec.chatSource + spec.chatVariables.dump() : "");
    key.add(path.string());
    key.add(std::to_string(size));
    key.add(std::to_string(mtimeNs));
    key.add(head.data(), head.size());
    return key.hex();
}

// Whether the cache entry is complete (its meta.json and files agree), read
// into `out`; a damaged entry is removed, to be made again.
bool reuseEntry(const fs::path& entry, CorpusCache& out)
{
    std::error_code ec;
    if (!fs::is_regular_file(entry / "meta.json", ec)) return false;
    try {
        std::ifstream m(entry / "meta.json");
        const json meta = json::parse(m);
        out.tokens = meta.at("tokens").get<std::uint64_t>();
        out.documents = meta.at("documents").get<std::uint64_t>();
        out.skippedLines = meta.at("skipped_lines").get<std::uint64_t>();
        out.skippedExamples = meta.at("skipped_examples").get<std::vector<std::string>>();
        out.dtype = meta.at("dtype").get<std::string>();
        const auto width = out.dtype == "uint32" ? 4u : 2u;
        if (fs::file_size(out.tokensPath, ec) == out.tokens * width &&
            fs::file_size(out.documentsPath, ec) == (out.documents + 1) * 8 &&
            (out.maskPath.empty() || fs::file_size(out.maskPath, ec) == out.tokens)) {
            out.reused = true;
            return true;
        }
    } catch (const std::exception&) {
    }
    fs::remove_all(entry, ec); // damaged: make it again
    return false;
}

// Calls `line` with each line of `file` (without its newline) and its
// number from 1, reading a block at a time; `progress` after each block.
void forEachLine(std::FILE* file, const std::string& name, std::uint64_t size, const CorpusProgress& progress,
                 const std::function<void(std::string_view, std::uint64_t)>& line)
{
    std::fseek(file, 0, SEEK_SET);
    std::vector<char> block(kBlock);
    std::string carry;
    std::uint64_t lineNo = 0, done = 0;
    while (true) {
        const std::size_t n = std::fread(block.data(), 1, block.size(), file);
        if (n == 0) break;
        done += n;
        std::size_t begin = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (block[i] != '\n') continue;
            ++lineNo;
            if (!carry.empty()) {
                carry.append(block.data() + begin, i - begin);
                line(carry, lineNo);
                carry.clear();
            } else {
                line(std::string_view(block.data() + begin, i - begin), lineNo);
            }
            begin = i + 1;
        }
        if (carry.size() + (n - begin) > kMaxDocument)
            throw InputError("data.path: " + name + " line " + std::to_string(lineNo + 1) + " is longer than 256 MiB");
        carry.append(block.data() + begin, n - begin);
        if (progress) progress(done, size);
    }
    if (std::ferror(file)) throw InputError("data.path: error reading " + name);
    if (!carry.empty()) line(carry, ++lineNo);
}

// Removes the entries of the same file, tokenizer and format other than
// `entry` (made before the file changed).
void pruneOlderEntries(const std::string& root, const fs::path& entry, const fs::path& path, const std::string& tokenizerHash,
                       const CorpusSpec& spec)
{
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
        if (e.path() == entry || !e.is_directory() || e.path().filename().string().find(".partial-") != std::string::npos) continue;
        try {
            std::ifstream m(e.path() / "meta.json");
            if (!m) continue;
            const json other = json::parse(m);
            if (other.value("path", "") == path.string() && other.value("tokenizer_hash", "") == tokenizerHash &&
                other.value("format", "") == spec.format && other.value("field", "") == spec.field)
                fs::remove_all(e.path(), ec);
        } catch (const std::exception&) {
        }
    }
}

// A JSONL record's text: the string in `field`. Empty, with `why` said,
// when the line is not an object holding a non-empty string there.
std::string jsonlText(std::string_view line, const std::string& field, std::string& why)
{
    json record;
    try {
        record = json::parse(line);
    } catch (const json::parse_error& e) {
        why = "not valid JSON (at byte " + std::to_string(e.byte) + ")";
        return {};
    }
    if (!record.is_object()) {
        why = "not a JSON object (it is " + jsonTypeName(record) + ")";
        return {};
    }
    const auto f = record.find(field);
    if (f == record.end()) {
        why = "no field \"" + clipForMessage(field, 40) + "\" (set data.field to the field that holds the text)";
    } else if (!f->is_string()) {
        why = "field \"" + clipForMessage(field, 40) + "\" is " + jsonTypeName(*f) + ", not a string";
    } else if (f->get_ref<const std::string&>().empty()) {
        why = "field \"" + clipForMessage(field, 40) + "\" is empty";
    } else {
        return f->get_ref<const std::string&>();
    }
    return {};
}

// The entry's meta.json: what it was made from and what it holds.
void writeMeta(const fs::path& dir, const CorpusSpec& spec, const Tokenizer& tok, const fs::path& path, std::uint64_t size,
               std::uint64_t mtimeNs, const CorpusCache& out)
{
    const json meta = {{"version", kFormatVersion},   {"path", path.string()},          {"format", spec.format},
                       {"field", spec.field},         {"tokenizer", tok.source()},      {"tokenizer_hash", tok.contentHash()},
                       {"eos", spec.eos},             {"size", size},                   {"mtime_ns", mtimeNs},
                       {"tokens", out.tokens},        {"documents", out.documents},     {"skipped_lines", out.skippedLines},
                       {"skipped_examples", out.skippedExamples}, {"dtype", out.dtype}, {"seconds", out.seconds},
                       {"mask", !out.maskPath.empty()}};
    {
        std::ofstream m(dir / "meta.json");
        m << meta.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
        if (!m) throw RunError("cannot write the token cache " + (dir / "meta.json").string());
    }
}

} // namespace

std::string encodeConversation(const ojson& record, const CorpusSpec& spec, const Tokenizer& tok, EncodedConversation& out)
{
    if (!spec.chat) return "no chat template";
    ojson messages;
    if (auto why = conversationMessages(record, messages); !why.empty()) return why;
    if (messages.empty()) return "an empty conversation";
    std::string prev;
    bool assistant = false;
    for (std::size_t k = 0; k < messages.size(); ++k) {
        const ojson& m = messages[k];
        const std::string n = "message " + std::to_string(k + 1);
        if (!m.is_object()) return n + " is not an object";
        const auto role = m.find("role");
        if (role == m.end() || !role->is_string()) return n + " has no \"role\"";
        const auto content = m.find("content");
        if (content == m.end() || !(content->is_string() || content->is_array())) return n + " has no \"content\" (a string)";
        const std::string r = role->get<std::string>();
        if (r != "system" && r != "user" && r != "assistant" && r != "tool")
            return n + " has the role \"" + clipForMessage(r, 40) + "\" (system, user, assistant or tool)";
        if (r == "system" && !prev.empty() && prev != "system") return "a wrong role order: " + n + " is a system message after the conversation started";
        if (r == "user" && prev == "user") return "a wrong role order: messages " + std::to_string(k) + " and " + std::to_string(k + 1) + " are both user messages";
        if (r == "assistant" && prev != "user" && prev != "tool") return "a wrong role order: " + n + " is an assistant message without a user message before it";
        if (r == "tool" && prev != "assistant" && prev != "tool") return "a wrong role order: " + n + " is a tool message that does not follow an assistant message";
        if (r == "assistant") assistant = true;
        prev = r;
    }
    if (!assistant) return "no assistant message to train on";

    ojson context = spec.chatVariables;
    for (const auto& [k, v] : record.items()) context[k] = v;
    context["messages"] = std::move(messages);
    context["add_generation_prompt"] = false;
    try {
        out.text = spec.chat->render(context);
    } catch (const InputError& e) {
        return e.what();
    }
    // Where each assistant message's text lands: render again with it between
    // two private-use marks and check that, marks removed, the text is the same
    // (as given, or stripped, for templates that trim it).
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    for (const bool stripped : {false, true}) {
        ojson marked = context;
        std::size_t marks = 0;
        const auto mark = [&](ojson& text) {
            const std::string c = text.get<std::string>();
            text = kOpen + (stripped ? stripWhiteSpace(c) : c) + kClose;
            ++marks;
        };
        for (auto& m : marked["messages"]) {
            if (m["role"] != "assistant") continue;
            if (m["content"].is_string()) {
                mark(m["content"]);
            } else if (m["content"].is_array()) {
                // Content as a list of parts (multimodal messages): each text part.
                for (auto& part : m["content"]) {
                    if (part.is_object() && part.contains("text") && part["text"].is_string()) mark(part["text"]);
                }
            }
        }
        std::string rendered;
        try {
            rendered = spec.chat->render(marked);
        } catch (const InputError&) {
            continue;
        }
        std::string plain;
        std::vector<std::pair<std::size_t, std::size_t>> found;
        std::size_t open = std::string::npos;
        bool ok = true;
        for (std::size_t i = 0; i < rendered.size();) {
            if (rendered.compare(i, 3, kOpen) == 0) {
                if (open != std::string::npos) ok = false;
                open = plain.size();
                i += 3;
            } else if (rendered.compare(i, 3, kClose) == 0) {
                if (open == std::string::npos) ok = false;
                else found.emplace_back(open, plain.size());
                open = std::string::npos;
                i += 3;
            } else {
                plain.push_back(rendered[i++]);
            }
        }
        // Every marked text must come out once: a template that drops a turn
        // (list content it does not render) would leave it without its loss.
        if (ok && open == std::string::npos && plain == out.text && found.size() == marks) {
            spans = std::move(found);
            break;
        }
    }
    if (spans.empty()) return "the chat template changes the assistant text in a way Trainbench cannot follow";
    // Each turn's end-of-turn token is trained on too: a special token right after the text.
    for (auto& [b, e] : spans) e += tok.specialTokenAt(std::string_view(out.text).substr(e));

    out.ids = tok.encode(out.text, false);
    const std::size_t before = out.ids.size();
    prependBos(out.ids, tok, spec.bos);
    const std::size_t shift = out.ids.size() - before;
    out.mask.assign(out.ids.size(), 0);
    const std::vector<std::int32_t> body(out.ids.begin() + std::ptrdiff_t(shift), out.ids.end());
    for (const auto& [b, e] : spans) {
        // Token boundaries from the ids of the text before each end: a token
        // that straddles the start belongs to the prompt.
        const std::size_t first = sharedPrefix(body, tok.encode(std::string_view(out.text).substr(0, b), false));
        const std::size_t last = e >= out.text.size() ? body.size() : sharedPrefix(body, tok.encode(std::string_view(out.text).substr(0, e), false));
        for (std::size_t i = first; i < last; ++i) out.mask[i + shift] = 1;
    }
    return {};
}

std::vector<std::int32_t> encodeRendered(const std::string& text, const Tokenizer& tok, std::int32_t bos)
{
    auto ids = tok.encode(text, false);
    prependBos(ids, tok, bos);
    return ids;
}

std::vector<std::int32_t> encodeChatConversation(const ojson& messages, const std::filesystem::path& folder, const Tokenizer& tok,
                                                 std::int32_t bos)
{
    const auto t = readFolderChatTemplate(folder);
    const ChatTemplate tmpl(t.source, t.where);
    ojson context = t.variables;
    context["messages"] = messages;
    context["add_generation_prompt"] = true;
    return encodeRendered(tmpl.render(context), tok, bos);
}

std::vector<std::int32_t> encodeChatPrompt(const std::string& text, const std::filesystem::path& folder, const Tokenizer& tok,
                                           std::int32_t bos)
{
    return encodeChatConversation(ojson::array({ojson{{"role", "user"}, {"content", text}}}), folder, tok, bos);
}

std::string defaultTokenCacheRoot()
{
    if (const char* e = std::getenv("TRAINBENCH_TOKEN_CACHE"); e && *e) return e;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "trainbench" / "token-cache").string();
    const char* home = std::getenv("HOME");
    return (fs::path(home && *home ? home : "/tmp") / ".cache" / "trainbench" / "token-cache").string();
}

std::vector<std::uint64_t> readDocumentStarts(const CorpusCache& cache)
{
    std::ifstream in(cache.documentsPath, std::ios::binary);
    std::vector<std::uint64_t> starts(cache.documents + 1);
    in.read(reinterpret_cast<char*>(starts.data()), std::streamsize(starts.size() * sizeof(std::uint64_t)));
    if (!in) throw RunError("the token cache " + cache.documentsPath + " is incomplete; delete " + cache.dir + " and run again");
    return starts;
}

CorpusCache tokenizeCorpus(const CorpusSpec& spec, const Tokenizer& tok, const std::string& root, const CorpusProgress& progress,
                           const std::atomic<bool>* cancel)
{
    if (spec.format != "text" && spec.format != "jsonl" && spec.format != "chat")
        throw InputError("data.source \"" + spec.format + "\" cannot be tokenized (text, jsonl or chat)");
    if (spec.format == "chat" && !spec.chat) throw InputError("data.source \"chat\" needs the model's chat template");
    std::error_code ec;
    const fs::path path = fs::weakly_canonical(spec.path, ec);
    struct stat st {};
    if (::stat(spec.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw InputError("data.path: cannot read " + spec.path + " (does it exist, is it a file, and may this user read it?)");
    const auto size = std::uint64_t(st.st_size);
    const auto mtimeNs = std::uint64_t(st.st_mtim.tv_sec) * 1000000000ull + std::uint64_t(st.st_mtim.tv_nsec);

    File in(std::fopen(spec.path.c_str(), "rb"));
    if (!in) throw InputError("data.path: cannot open " + spec.path);
    std::string head(std::min<std::uint64_t>(size, kHeadBytes), '\0');
    if (std::fread(head.data(), 1, head.size(), in.get()) != head.size()) throw InputError("data.path: cannot read " + spec.path);

    const std::string name = cacheKey(spec, tok, path, size, mtimeNs, head);
    const fs::path entry = fs::path(root) / name;

    CorpusCache out;
    out.dir = entry.string();
    out.tokensPath = (entry / "tokens.bin").string();
    out.documentsPath = (entry / "documents.bin").string();
    if (spec.format == "chat") out.maskPath = (entry / "mask.bin").string();
    out.fileBytes = size;
    out.dtype = tok.vocabLimit() <= 65536 ? "uint16" : "uint32";

    if (reuseEntry(entry, out)) {
        if (progress) progress(size, size);
        return out;
    }

    fs::create_directories(root, ec);
    if (ec) throw RunError("cannot create the token cache folder " + root + " (" + ec.message() + ")");
    std::random_device rd;
    const fs::path partial = fs::path(root) / (name + ".partial-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(partial, ec);
    if (ec) throw RunError("cannot create " + partial.string() + " (" + ec.message() + ")");
    struct Cleanup {
        fs::path dir;
        bool keep = false;
        ~Cleanup()
        {
            std::error_code e;
            if (!keep) fs::remove_all(dir, e);
        }
    } cleanup{partial};

    const auto started = std::chrono::steady_clock::now();
    Writer tokens((partial / "tokens.bin").string(), "tokens");
    Writer documents((partial / "documents.bin").string(), "documents");
    std::unique_ptr<Writer> mask;
    if (spec.format == "chat") mask = std::make_unique<Writer>((partial / "mask.bin").string(), "mask");
    const bool wide = out.dtype == "uint32";
    std::uint64_t written = 0;

    auto bad = [&](std::uint64_t lineNo, const std::string& why) {
        const std::string where = "line " + std::to_string(lineNo) + ": " + why;
        if (!spec.skipBadLines)
            throw InputError("data.path: " + spec.path + " " + where + ". Fix the line, or set data.skip_bad_lines to true to skip and count such lines");
        ++out.skippedLines;
        if (out.skippedExamples.size() < kSkippedExamples) out.skippedExamples.push_back(where);
    };
    auto put = [&](std::vector<std::int32_t> ids, std::vector<std::uint8_t>* loss) {
        if (spec.eos >= 0 && (ids.empty() || ids.back() != spec.eos)) {
            ids.push_back(spec.eos);
            if (loss) loss->push_back(0); // the separator after a conversation is not the assistant's
        }
        if (ids.empty()) return;
        documents.put<std::uint64_t>(written);
        for (const auto id : ids) {
            if (wide) tokens.put<std::uint32_t>(std::uint32_t(id));
            else tokens.put<std::uint16_t>(std::uint16_t(id));
        }
        if (mask && loss)
            for (const auto b : *loss) mask->put<std::uint8_t>(b);
        written += ids.size();
        ++out.documents;
    };
    auto emit = [&](const std::string& text) { put(tok.encode(text, true), nullptr); };

    std::string document;   // text: the paragraph being gathered
    std::uint64_t documentLine = 0;
    auto line = [&](std::string_view text, std::uint64_t lineNo) {
        if (cancel && cancel->load()) throw RunError("cancelled while tokenizing " + spec.path);
        if (const auto badAt = firstInvalidUtf8(text); badAt != std::string_view::npos) {
            bad(lineNo, "not valid UTF-8 (byte " + std::to_string(badAt + 1) + " of the line)");
            return;
        }
        if (spec.format == "text") {
            if (blank(text)) {
                if (!document.empty()) emit(document);
                document.clear();
                return;
            }
            if (document.size() + text.size() > kMaxDocument)
                throw InputError("data.path: " + spec.path + " line " + std::to_string(lineNo) + ": the paragraph starting at line " +
                                 std::to_string(documentLine) + " is longer than 256 MiB; separate documents with blank lines");
            if (document.empty()) documentLine = lineNo;
            else document.push_back('\n');
            document.append(text);
            return;
        }
        if (blank(text)) return; // an empty line holds no record
        if (spec.format == "chat") {
            ojson record;
            try {
                record = ojson::parse(text);
            } catch (const ojson::parse_error& e) {
                bad(lineNo, "not valid JSON (at byte " + std::to_string(e.byte) + ")");
                return;
            }
            EncodedConversation conversation;
            if (const std::string why = encodeConversation(record, spec, tok, conversation); !why.empty()) {
                bad(lineNo, why);
                return;
            }
            put(std::move(conversation.ids), &conversation.mask);
            return;
        }
        std::string why;
        const std::string recordText = jsonlText(text, spec.field, why);
        if (!why.empty()) bad(lineNo, why);
        else emit(recordText);
    };

    // The file, line by line, a block at a time: memory holds one block and one document.
    forEachLine(in.get(), spec.path, size, progress, line);
    if (spec.format == "text" && !document.empty()) emit(document);
    documents.put<std::uint64_t>(written);
    tokens.close();
    documents.close();
    if (mask) mask->close();
    out.tokens = written;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    writeMeta(partial, spec, tok, path, size, mtimeNs, out);
    fs::rename(partial, entry, ec);
    if (ec) {
        // Another run finished the same entry first: use it.
        if (!fs::is_regular_file(entry / "meta.json")) throw RunError("cannot store the token cache in " + entry.string() + " (" + ec.message() + ")");
    } else {
        cleanup.keep = true;
    }
    // Older entries of the same file (it changed since) are of no further use.
    pruneOlderEntries(root, entry, path, tok.contentHash(), spec);
    return out;
}

std::vector<std::string> tokenPieces(const Tokenizer& tok, const std::vector<std::int32_t>& ids)
{
    // The growth of the decoded text over the tokens before it, counting
    // only the last few: a decoder's context is a character's bytes and a
    // word's leading space, so each piece costs the same however long the
    // example (the whole prefix made 2,000 tokens 2 million decodes).
    constexpr std::size_t kContext = 16;
    std::vector<std::string> pieces;
    pieces.reserve(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto from = ids.begin() + static_cast<std::ptrdiff_t>(i > kContext ? i - kContext : 0);
        const std::vector<std::int32_t> before(from, ids.begin() + static_cast<std::ptrdiff_t>(i));
        const std::vector<std::int32_t> with(from, ids.begin() + static_cast<std::ptrdiff_t>(i + 1));
        const std::string a = before.empty() ? std::string() : tok.decode(before), b = tok.decode(with);
        if (b.size() >= a.size() && b.compare(0, a.size(), a) == 0) pieces.push_back(b.substr(a.size()));
        else pieces.push_back(tok.decode({ids[i]}));
    }
    return pieces;
}

DocumentPreview previewFirstDocument(const CorpusSpec& spec, const Tokenizer& tok, std::size_t maxShown)
{
    DocumentPreview out;
    File in(std::fopen(spec.path.c_str(), "rb"));
    if (!in) {
        out.error = "cannot read " + spec.path;
        return out;
    }
    // Lines up to the end of the first document, reading at most 4 MiB.
    constexpr std::size_t kLimit = 4u << 20;
    std::string buffer(kLimit, '\0');
    buffer.resize(std::fread(buffer.data(), 1, kLimit, in.get()));
    std::string document;
    std::uint64_t lineNo = 0;
    std::size_t at = 0;
    while (at < buffer.size()) {
        std::size_t end = buffer.find('\n', at);
        const bool complete = end != std::string::npos;
        if (!complete) end = buffer.size();
        const std::string_view text(buffer.data() + at, end - at);
        at = end + 1;
        ++lineNo;
        if (!complete && buffer.size() == kLimit) break; // a cut line: what was read so far is the preview
        if (firstInvalidUtf8(text) != std::string_view::npos) {
            out.error = "line " + std::to_string(lineNo) + ": not valid UTF-8";
            return out;
        }
        if (spec.format == "text") {
            if (blank(text)) {
                if (!document.empty()) break;
                continue;
            }
            if (document.empty()) out.line = lineNo;
            else document.push_back('\n');
            document.append(text);
            continue;
        }
        if (blank(text)) continue;
        out.line = lineNo;
        if (spec.format == "chat") {
            ojson record;
            try {
                record = ojson::parse(text);
            } catch (const ojson::parse_error& e) {
                out.error = "line " + std::to_string(lineNo) + ": not valid JSON (at byte " + std::to_string(e.byte) + ")";
                return out;
            }
            EncodedConversation c;
            if (const std::string why = encodeConversation(record, spec, tok, c); !why.empty()) {
                out.error = "line " + std::to_string(lineNo) + ": " + why;
                return out;
            }
            if (spec.eos >= 0 && (c.ids.empty() || c.ids.back() != spec.eos)) {
                c.ids.push_back(spec.eos);
                c.mask.push_back(0);
            }
            out.tokens = c.ids.size();
            c.ids.resize(std::min(c.ids.size(), maxShown));
            c.mask.resize(c.ids.size());
            out.mask = std::move(c.mask);
            out.ids = std::move(c.ids);
            document.clear();
            break;
        }
        json record;
        try {
            record = json::parse(text);
        } catch (const json::parse_error& e) {
            out.error = "line " + std::to_string(lineNo) + ": not valid JSON (at byte " + std::to_string(e.byte) + ")";
            return out;
        }
        const auto f = record.is_object() ? record.find(spec.field) : record.end();
        if (!record.is_object() || f == record.end() || !f->is_string()) {
            out.error = "line " + std::to_string(lineNo) + ": no string field \"" + clipForMessage(spec.field, 40) + "\"";
            return out;
        }
        document = f->get<std::string>();
        break;
    }
    std::vector<std::int32_t> ids;
    if (spec.format == "chat") {
        if (out.ids.empty()) {
            out.error = spec.path + " holds no conversation";
            return out;
        }
        ids = std::move(out.ids);
    } else {
        if (document.empty()) {
            out.error = spec.path + " holds no document";
            return out;
        }
        ids = tok.encode(document, true);
        if (spec.eos >= 0 && (ids.empty() || ids.back() != spec.eos)) ids.push_back(spec.eos);
        out.tokens = ids.size();
        ids.resize(std::min(ids.size(), maxShown));
    }
    out.pieces = tokenPieces(tok, ids);
    out.ids = std::move(ids);
    return out;
}

} // namespace tb::text
