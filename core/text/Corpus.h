#pragma once
// A data file tokenized once into a memory-mappable token cache.
//
// Formats: "text" (documents separated by blank lines), "jsonl" (one JSON
// object per line, the document in a string field) and "chat" (one JSON object
// per line with "messages", or in ShareGPT's or Alpaca's shape, rendered with
// the model's chat template). Each
// document becomes its ids (the tokenizer's template adds BOS where it says
// so; a chat template writes its own) followed by EOS, so documents pack into
// training windows with EOS between them. A chat corpus also gets a loss mask:
// 1 on each assistant message's tokens and the end-of-turn token after it.
//
// The cache entry is keyed by the tokenizer's content hash, the format and
// its options, and the file's size, modification time and the hash of its
// first MiB: a changed file is tokenized again, an unchanged one never.
// An entry is written under a temporary name and renamed when complete, so
// an interrupted run leaves nothing that a later run would trust.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/ChatRecords.h"
#include "text/ChatTemplate.h"
#include "text/Tokenizer.h"

namespace tb::text {

struct CorpusSpec {
    std::string path;
    std::string format = "text"; // text | jsonl | chat
    std::string field = "text";  // jsonl: the string field holding a document
    bool skipBadLines = false;   // count and skip bad lines instead of stopping at the first
    std::int32_t eos = -1;       // appended after each document; -1: none
    std::int32_t bos = -1;       // chat: put first when the tokenizer adds one and the template did not
    // chat: the template, the variables it gets (bos_token, eos_token, ...) and its text (for the key).
    const ChatTemplate* chat = nullptr;
    nlohmann::ordered_json chatVariables = nlohmann::ordered_json::object();
    std::string chatSource;
};

// One conversation (in any shape conversationMessages reads, text/ChatRecords.h)
// rendered and tokenized with its loss mask. Returns the reason it is bad data
// (empty when it is not): no messages, a message without role or content, a
// wrong role order, no assistant message, or the template refusing it.
struct EncodedConversation {
    std::string text;               // as the template renders it
    std::vector<std::int32_t> ids;
    std::vector<std::uint8_t> mask; // 1: an assistant token (the loss is on these)
};
std::string encodeConversation(const nlohmann::ordered_json& record, const CorpusSpec& spec, const Tokenizer& tokenizer,
                               EncodedConversation& out);

// Rendered chat text -> ids: without the tokenizer's template (a chat template
// writes its own BOS), but with `bos` first when the tokenizer would add one
// and the text did not bring it, so a conversation has exactly one.
std::vector<std::int32_t> encodeRendered(const std::string& text, const Tokenizer& tokenizer, std::int32_t bos);

// A prompt for a chat model: `messages` (each {"role", "content"}) rendered
// with the folder's chat template and add_generation_prompt, and its ids
// (encodeRendered). InputError where the template refuses them.
std::vector<std::int32_t> encodeChatConversation(const nlohmann::ordered_json& messages, const std::filesystem::path& folder,
                                                 const Tokenizer& tokenizer, std::int32_t bos);
// The same for `text` as one user message.
std::vector<std::int32_t> encodeChatPrompt(const std::string& text, const std::filesystem::path& folder, const Tokenizer& tokenizer,
                                           std::int32_t bos);

struct CorpusCache {
    std::string dir;
    std::string tokensPath;      // little-endian ids, `dtype` wide
    std::string dtype;           // uint16 | uint32
    std::string documentsPath;   // little-endian uint64: the first id of each document, then the total
    std::string maskPath;        // chat: one byte per id, 1 where the loss counts; empty otherwise
    std::uint64_t tokens = 0;
    std::uint64_t documents = 0;
    std::uint64_t skippedLines = 0;
    std::vector<std::string> skippedExamples; // the first few reasons, "line 12: ..."
    std::uint64_t fileBytes = 0;
    double seconds = 0;          // tokenizing time (0 when reused)
    bool reused = false;
};

// Progress: bytes of the data file read so far, and its size.
using CorpusProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

// $TRAINBENCH_TOKEN_CACHE, else $XDG_CACHE_HOME/trainbench/token-cache, else ~/.cache/trainbench/token-cache.
std::string defaultTokenCacheRoot();

// Tokenizes spec.path into a cache entry under `root`, or reuses the entry a
// previous call made. Throws InputError naming the file, line and field of bad
// data (unless skipBadLines), and RunError("cancelled") when *cancel turns true.
CorpusCache tokenizeCorpus(const CorpusSpec& spec, const Tokenizer& tokenizer, const std::string& root,
                           const CorpusProgress& progress = {}, const std::atomic<bool>* cancel = nullptr);

// The document starts of an entry (documents + 1 values, the last = tokens).
std::vector<std::uint64_t> readDocumentStarts(const CorpusCache& cache);

// The first document of a data file, tokenized, for a preview: its text (at
// most `maxShownTokens` tokens of it), each of those tokens' text, and the
// token count of the whole document. `error` says why there is none (an empty
// file, a bad first line: the message tokenizeCorpus would give).
struct DocumentPreview {
    std::string error;
    std::uint64_t line = 0;              // the line it starts on
    std::vector<std::int32_t> ids;       // the shown ones
    std::vector<std::string> pieces;     // each shown id's text
    std::vector<std::uint8_t> mask;      // chat: 1 on the shown assistant tokens
    std::uint64_t tokens = 0;            // the whole document, with BOS/EOS as training sees it
};
// Each id's text as it reads in its place: the growth of the decoded text
// over the 16 tokens before it (a SentencePiece word's leading space, a
// byte-level token's bytes), or the token decoded alone where a token ends
// inside a character.
std::vector<std::string> tokenPieces(const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids);

DocumentPreview previewFirstDocument(const CorpusSpec& spec, const Tokenizer& tokenizer, std::size_t maxShownTokens = 400);

} // namespace tb::text
