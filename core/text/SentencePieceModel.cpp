#include "text/SentencePieceModel.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "common/Errors.h"

namespace tb::text {
namespace {

using Put = void (*)(void* ctx, const char* bytes, std::size_t length);
using PushIds = void (*)(void* ctx, const int* ids, std::size_t count);

void putString(void* ctx, const char* bytes, std::size_t length) { static_cast<std::string*>(ctx)->append(bytes, length); }
void pushIds(void* ctx, const int* ids, std::size_t count)
{
    static_cast<std::vector<std::int32_t>*>(ctx)->insert(static_cast<std::vector<std::int32_t>*>(ctx)->end(), ids, ids + count);
}

// The shim's functions (SentencePieceShim.cpp), loaded once.
struct Shim {
    void* (*load)(const char*, Put, void*) = nullptr;
    void (*free)(void*) = nullptr;
    int (*encode)(void*, const char*, std::size_t, PushIds, void*, Put, void*) = nullptr;
    int (*decode)(void*, const int*, std::size_t, Put, void*) = nullptr;
    int (*size)(void*) = nullptr;
    void (*piece)(void*, int, Put, void*) = nullptr;
    int (*pieceToId)(void*, const char*, std::size_t) = nullptr;
    int (*isControlOrUnknown)(void*, int) = nullptr;
    int (*bos)(void*) = nullptr;
    int (*eos)(void*) = nullptr;
    std::string error; // why it could not be loaded
};

std::string executableFolder()
{
    char path[4096] = {0};
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return {};
    std::string s(path, static_cast<std::size_t>(n));
    return s.substr(0, s.rfind('/'));
}

const Shim& shim()
{
    static std::once_flag once;
    static Shim s;
    std::call_once(once, [] {
        // The installed one, relative to the program's folder (a program in
        // bin/, or trainbench-cli-torch beside the library in lib/trainbench/);
        // then the build tree's (programs and tests run from the build tree).
        std::vector<std::string> candidates;
#ifdef TB_SP_SHIM_FROM_BIN
        if (const auto exe = executableFolder(); !exe.empty()) {
            candidates.push_back(exe + "/" TB_SP_SHIM_FROM_BIN);
            candidates.push_back(exe + "/libtb_sentencepiece.so");
        }
#endif
#ifdef TB_SP_SHIM_BUILD_PATH
        candidates.push_back(TB_SP_SHIM_BUILD_PATH);
#endif
        void* handle = nullptr;
        std::string tried;
        for (const auto& path : candidates) {
            if (access(path.c_str(), R_OK) != 0) continue;
            // Its own scope first: libsentencepiece's bundled protobuf binds to itself, not to libprotobuf.so.32.
            handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
            if (handle) break;
            const char* why = dlerror();
            tried += (tried.empty() ? "" : "; ") + path + ": " + (why ? why : "cannot be loaded");
        }
        if (!handle) {
            std::string looked;
            for (const auto& path : candidates) looked += (looked.empty() ? "" : ", ") + path;
            s.error = tried.empty() ? "libtb_sentencepiece.so, Trainbench's SentencePiece library, is missing (looked for "
                                          + looked + "); reinstall Trainbench"
                                    : tried;
            return;
        }
        const auto bind = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
            if (!fn && s.error.empty()) s.error = std::string("libtb_sentencepiece.so lacks ") + name;
        };
        bind(s.load, "tb_sp_load");
        bind(s.free, "tb_sp_free");
        bind(s.encode, "tb_sp_encode");
        bind(s.decode, "tb_sp_decode");
        bind(s.size, "tb_sp_size");
        bind(s.piece, "tb_sp_piece");
        bind(s.pieceToId, "tb_sp_piece_to_id");
        bind(s.isControlOrUnknown, "tb_sp_is_control_or_unknown");
        bind(s.bos, "tb_sp_bos_id");
        bind(s.eos, "tb_sp_eos_id");
    });
    return s;
}

} // namespace

struct SentencePieceModel::Impl {
    void* handle = nullptr;
    std::int32_t size = 0;
    std::int32_t bos = -1, eos = -1;
    std::vector<std::string> pieces;
    std::vector<bool> special;
    ~Impl()
    {
        if (handle) shim().free(handle);
    }
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : m(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::shared_ptr<const SentencePieceModel> SentencePieceModel::load(const std::filesystem::path& file)
{
#ifndef TB_HAVE_SENTENCEPIECE
    throw InputError(file.string() + " is a SentencePiece tokenizer.model, and this build of Trainbench has no "
                     "SentencePiece (libsentencepiece-dev was missing when it was built); a tokenizer.json of the same "
                     "model works");
#endif
    const Shim& s = shim();
    if (!s.error.empty()) throw InputError(file.string() + " is a SentencePiece tokenizer.model, which cannot be read here: " + s.error);
    if (access(file.c_str(), R_OK) != 0) throw InputError(file.string() + ": cannot read the tokenizer");
    auto impl = std::make_unique<Impl>();
    std::string why;
    impl->handle = s.load(file.c_str(), &putString, &why);
    if (!impl->handle) {
        throw InputError(file.string() + ": not a SentencePiece model that can be read (" + why
                         + "); a model folder's tokenizer.model comes from the model's publisher");
    }
    impl->size = s.size(impl->handle);
    if (impl->size <= 0) throw InputError(file.string() + ": the SentencePiece model has no pieces");
    impl->bos = s.bos(impl->handle);
    impl->eos = s.eos(impl->handle);
    if (impl->bos >= impl->size) impl->bos = -1;
    if (impl->eos >= impl->size) impl->eos = -1;
    // The pieces, read once: idToToken and tokenToId are called per token.
    impl->pieces.resize(static_cast<std::size_t>(impl->size));
    impl->special.resize(static_cast<std::size_t>(impl->size));
    for (std::int32_t id = 0; id < impl->size; ++id) {
        s.piece(impl->handle, id, &putString, &impl->pieces[static_cast<std::size_t>(id)]);
        impl->special[static_cast<std::size_t>(id)] = s.isControlOrUnknown(impl->handle, id) != 0;
    }
    return std::shared_ptr<const SentencePieceModel>(new SentencePieceModel(std::move(impl)));
}

void SentencePieceModel::tokenize(std::string_view text, std::vector<std::int32_t>& ids) const
{
    std::string why;
    if (shim().encode(m->handle, text.data(), text.size(), &pushIds, &ids, &putString, &why) != 0) {
        throw InputError("SentencePiece could not encode the text: " + why);
    }
}

void SentencePieceModel::decodeRun(std::span<const std::int32_t> ids, std::vector<std::string>& out) const
{
    const std::vector<int> in(ids.begin(), ids.end());
    std::string text;
    if (shim().decode(m->handle, in.data(), in.size(), &putString, &text) != 0) {
        throw InputError("SentencePiece could not decode the ids: " + text);
    }
    out.push_back(std::move(text));
}

std::string SentencePieceModel::describeIds(std::int32_t) const
{
    return "tokenizer.model's pieces are 0 to " + std::to_string(m->size - 1) + ", and the added tokens of tokenizer_config.json";
}

std::int32_t SentencePieceModel::size() const { return m->size; }

std::optional<std::string> SentencePieceModel::idToToken(std::int32_t id) const
{
    if (id < 0 || id >= m->size) return std::nullopt;
    return m->pieces[static_cast<std::size_t>(id)];
}

std::optional<std::int32_t> SentencePieceModel::tokenToId(std::string_view piece) const
{
    // PieceToId gives the unknown piece's id for a piece it does not have.
    const int id = shim().pieceToId(m->handle, piece.data(), piece.size());
    if (id < 0 || id >= m->size || m->pieces[static_cast<std::size_t>(id)] != piece) return std::nullopt;
    return id;
}

bool SentencePieceModel::isControlOrUnknown(std::int32_t id) const
{
    return id >= 0 && id < m->size && m->special[static_cast<std::size_t>(id)];
}

std::int32_t SentencePieceModel::bos() const { return m->bos; }
std::int32_t SentencePieceModel::eos() const { return m->eos; }

} // namespace tb::text
