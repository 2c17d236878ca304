#pragma once
// Datasets the trainer samples from. Each yields (inputs, targets, loss mask).

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "config/RunConfig.h"
#include "train/DataPreparation.h"
#include "train/SampleText.h"

namespace tb::text {
class Tokenizer;
struct CorpusCache;
} // namespace tb::text

namespace tb {

struct Batch {
    torch::Tensor inputs;  // [B, T] int64
    torch::Tensor targets; // [B, T] int64
    torch::Tensor mask;    // [B, T] float, 1 where the position counts; undefined = all count
    Batch to(const torch::Device& device) const
    {
        return {inputs.to(device), targets.to(device), mask.defined() ? mask.to(device) : mask};
    }
    // Rows [start, start + count): one rank's share of a global batch.
    Batch rows(std::int64_t start, std::int64_t count) const
    {
        return {inputs.narrow(0, start, count), targets.narrow(0, start, count), mask.defined() ? mask.narrow(0, start, count) : mask};
    }
    double maskedCount() const
    {
        return mask.defined() ? mask.sum().item<double>() : static_cast<double>(targets.numel());
    }
};

class Dataset {
public:
    virtual ~Dataset() = default;
    virtual int vocabSize() const = 0;
    virtual int seqLen() const = 0;
    // A random training batch drawn with gen (its state is checkpointed).
    virtual Batch trainBatch(int batchSize, at::Generator& gen) const = 0;
    // The fixed validation set, split into batches (same every call).
    virtual std::vector<Batch> validationBatches(int batchSize, int maxBatches) const = 0;
    // Whether exact-match accuracy over the masked positions means something.
    virtual bool hasExactMatch() const = 0;
    virtual std::string describe() const = 0;
    // Prompts and completions for sampling: text -> token ids, generated ids -> text.
    // encodePrompt throws InputError for a prompt the task cannot read.
    virtual std::vector<std::int64_t> encodePrompt(const std::string& text) const = 0;
    virtual std::string decodeCompletion(const std::vector<std::int64_t>& ids) const = 0;
    // The completion's text as it continues the prompt's (a tokenizer's decoder
    // may treat the first token of a text differently, e.g. strip its space).
    virtual std::string decodeContinuation(const std::vector<std::int64_t>& prompt, const std::vector<std::int64_t>& ids) const
    {
        (void)prompt;
        return decodeCompletion(ids);
    }
    // The prompt as a sample shows it before its completion: as typed, or
    // (token ids) the ids read from it, so prompt and completion join alike
    // whatever separators were typed.
    virtual std::string promptAsShown(const std::string& typed, const std::vector<std::int64_t>& ids) const
    {
        (void)ids;
        return typed;
    }
    // The token that ends a completion, or -1.
    virtual std::int64_t endToken() const { return -1; }
    // A chat prompt: `text` as one user message through the model's chat
    // template, ready for the assistant's reply. InputError where the data has no chat template.
    virtual std::vector<std::int64_t> encodeChatPrompt(const std::string& text) const;
    // Whether a generated id ends an assistant turn (a special token).
    virtual bool endsTurn(std::int64_t id) const { return id == endToken(); }
    // Whether a completion's text grows at its end as tokens come (it can be
    // shown as it is generated); false where it is written only when done.
    virtual bool completionGrows() const { return true; }
};

// Throws InputError (e.g. unreadable or too short text file).
std::unique_ptr<Dataset> makeDataset(const RunConfig& config, const DataPreparation& prep = {});
// The vocabulary of the dataset a config names, without reading its data.
int datasetVocabSize(const RunConfig& config);

// The progress line of tokenizing a file: "tokenizing F: 40% (1.20 MiB of
// 3.00 MiB)", in the unit that suits the file (a small one said "0.0 of 0.0 MB").
std::string tokenizingProgressText(const std::string& shown, std::uint64_t done, std::uint64_t total);

// Addition: "a+b=" followed by the digits of a+b, least significant first,
// then an end marker. Reversing the answer lets a causal model produce each
// digit after the digits it depends on (carries flow from low to high digits).
// Pairs are split into train/held-out by a hash of the unordered pair, so
// neither a+b nor b+a of a validation sum ever appears in training.
class AdditionDataset final : public Dataset {
public:
    enum Token { Plus = 10, Equals = 11, End = 12 };
    AdditionDataset(int digits, double valFraction);
    int vocabSize() const override { return 13; }
    int seqLen() const override { return additionSequenceLength(m_digits); }
    Batch trainBatch(int batchSize, at::Generator& gen) const override;
    std::vector<Batch> validationBatches(int batchSize, int maxBatches) const override;
    bool hasExactMatch() const override { return true; }
    std::string describe() const override;
    // "12+34=" (numbers of at most `digits` digits) -> a, '+', b, '=' tokens.
    std::vector<std::int64_t> encodePrompt(const std::string& text) const override;
    // Reversed answer digits up to the end marker -> the sum written the usual way.
    std::string decodeCompletion(const std::vector<std::int64_t>& ids) const override;
    std::int64_t endToken() const override { return End; }
    bool completionGrows() const override { return false; } // the sum's digits come least significant first

    bool isHeldOut(std::uint64_t a, std::uint64_t b) const;
    // The full token sequence of one example (length seqLen() + 1).
    std::vector<std::int64_t> encode(std::uint64_t a, std::uint64_t b) const;

private:
    Batch makeBatch(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& pairs) const;
    int m_digits;
    double m_valFraction;
    std::uint64_t m_limit; // 10^digits
};

// Byte-level language modelling on a text file; the last val_fraction of the
// bytes is the validation split. A file is memory-mapped read-only: batches
// gather their windows from the mapping, so a large file costs neither a copy
// nor a start-up read.
class TextDataset final : public Dataset {
public:
    static std::unique_ptr<TextDataset> fromFile(const std::string& path, int seqLen, double valFraction);
    static std::unique_ptr<TextDataset> fromText(std::string text, std::string sourceName, int seqLen,
                                                 double valFraction);
    int vocabSize() const override { return 256; }
    int seqLen() const override { return m_seqLen; }
    Batch trainBatch(int batchSize, at::Generator& gen) const override;
    std::vector<Batch> validationBatches(int batchSize, int maxBatches) const override;
    bool hasExactMatch() const override { return false; }
    std::string describe() const override;
    std::vector<std::int64_t> encodePrompt(const std::string& text) const override;
    std::string decodeCompletion(const std::vector<std::int64_t>& ids) const override;

private:
    TextDataset(const std::uint8_t* bytes, std::int64_t size, std::shared_ptr<const void> owner,
                std::string sourceName, int seqLen, double valFraction);
    Batch windows(const torch::Tensor& starts) const;
    std::shared_ptr<const void> m_owner; // keeps the mapping or the string alive
    torch::Tensor m_data;                // uint8 view of the bytes (no copy); windows become int64
    std::string m_source;
    int m_seqLen;
    std::int64_t m_trainEnd;
};

// Token ids from a file of little-endian uint16 or uint32 values (the layout
// of nanoGPT's train.bin), memory-mapped read-only like TextDataset; the last
// val_fraction of the ids is the validation split. Every id is checked against
// the model's vocabulary when the file is opened.
class TokenDataset final : public Dataset {
public:
    // Throws InputError for an unreadable file, a size that is not a whole
    // number of ids, too few ids, or an id at or above vocabSize (naming the
    // first such position).
    static std::unique_ptr<TokenDataset> fromFile(const std::string& path, const std::string& dtype, int vocabSize,
                                                  int seqLen, double valFraction);
    // A tokenized corpus (text::tokenizeCorpus): the held-out split is by
    // document, the last documents making up about val_fraction of the ids;
    // prompts are text through `tokenizer`, completions decode back to text.
    static std::unique_ptr<TokenDataset> fromCorpus(const text::CorpusCache& corpus, const std::string& source,
                                                    std::shared_ptr<const text::Tokenizer> tokenizer, std::int32_t eos,
                                                    int vocabSize, int seqLen, double valFraction);
    // Random ids below vocabSize in a token file's layout (uint32 when
    // wideIds, else uint16; with a chat corpus's loss mask when withMask),
    // held outside the counting allocator as a mapped file is: the derived
    // memory plan's probes train on it (train/DerivedPlan.cpp).
    static std::unique_ptr<TokenDataset> synthetic(int vocabSize, int seqLen, bool wideIds, bool withMask);
    // The model folder whose chat template chat prompts use, and its BOS.
    void setChatFolder(std::string folder, std::int32_t bos) { m_chatFolder = std::move(folder); m_bos = bos; }
    // A tokenized corpus's tokenizer (null for an id file), its model folder and BOS.
    const std::shared_ptr<const text::Tokenizer>& tokenizer() const { return m_tokenizer; }
    const std::string& chatFolder() const { return m_chatFolder; }
    std::int32_t bos() const { return m_bos; }
    int vocabSize() const override { return m_vocab; }
    int seqLen() const override { return m_seqLen; }
    Batch trainBatch(int batchSize, at::Generator& gen) const override;
    std::vector<Batch> validationBatches(int batchSize, int maxBatches) const override;
    bool hasExactMatch() const override { return false; }
    std::string describe() const override;
    // Prompts are token ids written "1,2,3" for an id file; text for a tokenized corpus.
    std::vector<std::int64_t> encodePrompt(const std::string& text) const override;
    std::string decodeCompletion(const std::vector<std::int64_t>& ids) const override;
    std::string decodeContinuation(const std::vector<std::int64_t>& prompt, const std::vector<std::int64_t>& ids) const override;
    std::string promptAsShown(const std::string& typed, const std::vector<std::int64_t>& ids) const override;
    std::int64_t endToken() const override { return m_eos; }
    std::vector<std::int64_t> encodeChatPrompt(const std::string& text) const override;
    bool endsTurn(std::int64_t id) const override;

private:
    TokenDataset() = default;
    static std::unique_ptr<TokenDataset> map(const std::string& path, const std::string& dtype, int vocabSize, int seqLen,
                                             const std::string& shownAs);
    std::shared_ptr<const text::Tokenizer> m_tokenizer; // a tokenized corpus: prompts are text
    std::string m_chatFolder;                            // the model folder (its chat template), when it has one
    std::int32_t m_bos = -1;
    std::shared_ptr<const void> m_maskOwner;             // chat: the loss mask's mapping
    torch::Tensor m_mask;                                // chat: uint8 per id, 1 where the loss counts
    std::int64_t m_eos = -1;
    std::int64_t m_documents = 0, m_heldOutDocuments = 0;
    Batch windows(const torch::Tensor& starts) const;
    std::shared_ptr<const void> m_owner; // the mapping
    torch::Tensor m_data;                // int16 or int32 view of the ids (no copy)
    std::int64_t m_unsignedMask = 0;     // 0xffff or 0xffffffff: the ids are unsigned
    std::string m_source, m_dtype;
    int m_vocab = 0;
    int m_seqLen = 0;
    std::int64_t m_trainEnd = 0;
};


} // namespace tb
