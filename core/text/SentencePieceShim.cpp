// libtb_sentencepiece.so: libsentencepiece behind a C interface, loaded by
// SentencePieceModel with dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Debian's
// libsentencepiece carries its own copy of protobuf-lite and exports it;
// linked into a program that also loads LibTorch's libprotobuf.so.32, the
// two copies bind to each other and the program crashes while loading.
// Loaded on its own, this copy binds only to itself.
#include <sentencepiece_processor.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Put = void (*)(void* ctx, const char* bytes, std::size_t length);
using PushIds = void (*)(void* ctx, const int* ids, std::size_t count);

void say(Put put, void* ctx, const std::string& text)
{
    if (put) put(ctx, text.data(), text.size());
}

} // namespace

extern "C" {

// A processor for the model file, or null with the reason through `put`.
__attribute__((visibility("default"))) void* tb_sp_load(const char* path, Put put, void* ctx)
{
    auto* sp = new sentencepiece::SentencePieceProcessor;
    const auto status = sp->Load(path);
    if (!status.ok()) {
        say(put, ctx, status.ToString());
        delete sp;
        return nullptr;
    }
    return sp;
}

__attribute__((visibility("default"))) void tb_sp_free(void* handle)
{
    delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

// 0 and the ids through `push`, or -1 and the reason through `put`.
__attribute__((visibility("default"))) int tb_sp_encode(void* handle, const char* text, std::size_t length, PushIds push,
                                                        void* idsCtx, Put put, void* errCtx)
{
    std::vector<int> ids;
    const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(std::string_view(text, length), &ids);
    if (!status.ok()) {
        say(put, errCtx, status.ToString());
        return -1;
    }
    push(idsCtx, ids.data(), ids.size());
    return 0;
}

// 0 and the text through `put`, or -1 and the reason through `put`.
__attribute__((visibility("default"))) int tb_sp_decode(void* handle, const int* ids, std::size_t count, Put put, void* ctx)
{
    std::string text;
    const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(std::vector<int>(ids, ids + count), &text);
    if (!status.ok()) {
        say(put, ctx, status.ToString());
        return -1;
    }
    say(put, ctx, text);
    return 0;
}

__attribute__((visibility("default"))) int tb_sp_size(void* handle)
{
    return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

__attribute__((visibility("default"))) void tb_sp_piece(void* handle, int id, Put put, void* ctx)
{
    say(put, ctx, static_cast<sentencepiece::SentencePieceProcessor*>(handle)->IdToPiece(id));
}

__attribute__((visibility("default"))) int tb_sp_piece_to_id(void* handle, const char* piece, std::size_t length)
{
    return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->PieceToId(std::string_view(piece, length));
}

// The model's BOS and EOS ids (-1: none).
__attribute__((visibility("default"))) int tb_sp_bos_id(void* handle)
{
    return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->bos_id();
}

__attribute__((visibility("default"))) int tb_sp_eos_id(void* handle)
{
    return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->eos_id();
}

// 1 for a control symbol (<s>, </s>) or the unknown piece.
__attribute__((visibility("default"))) int tb_sp_is_control_or_unknown(void* handle, int id)
{
    const auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
    return sp->IsControl(id) || sp->IsUnknown(id) ? 1 : 0;
}

} // extern "C"
