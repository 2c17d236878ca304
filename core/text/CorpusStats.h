#pragma once
// What a tokenized corpus holds, as the dataset browser and `trainbench-cli
// data` show it: its examples (documents, conversations), their token
// lengths, how many a training window cannot hold whole, how many rows were
// dropped, and any one example's tokens with its loss mask. Read from the
// token cache (text/Corpus.h), so the numbers are cached with the tokens.

#include <cstdint>
#include <string>
#include <vector>

#include "text/Corpus.h"

namespace tb::text {

struct CorpusStats {
    std::uint64_t documents = 0;
    std::uint64_t tokens = 0;
    std::uint64_t lossTokens = 0;  // chat: the tokens the loss is on (the assistant's); else every token
    std::uint64_t skippedLines = 0; // rows dropped as bad data (data.skip_bad_lines)
    std::vector<std::string> skippedExamples;
    std::vector<std::uint64_t> lengths; // each example's tokens, in file order (with BOS and EOS as training sees them)
    std::uint64_t shortest() const;
    std::uint64_t longest() const;
    std::uint64_t median() const;
    double mean() const;
    // Examples a training window of seqLen + 1 tokens cannot hold whole:
    // packed, they are trained on in pieces, never whole.
    std::uint64_t longerThanWindow(std::int64_t seqLen) const;
    // Examples per bin of `width` tokens from 0 (bin k: lengths in [k w, (k+1) w)).
    std::vector<std::uint64_t> histogram(std::uint64_t width) const;
};

// Throws RunError when the cache entry is incomplete.
CorpusStats corpusStats(const CorpusCache& cache);

// The numbers in sentences, one a line (the dataset browser's summary and
// `trainbench-cli data`'s): examples and tokens, lengths, how many a
// training window of seqLen + 1 tokens cannot hold, rows dropped.
std::vector<std::string> describeCorpus(const CorpusStats& stats, std::int64_t seqLen, bool chat);


// One example's ids (at most maxTokens of them, from its start) and, for a
// chat corpus, its loss mask (1 where the loss counts); `tokens` is its length.
struct CorpusExample {
    std::vector<std::int32_t> ids;
    std::vector<std::uint8_t> mask;
    std::uint64_t tokens = 0;
};
CorpusExample readCorpusExample(const CorpusCache& cache, const std::vector<std::uint64_t>& starts, std::uint64_t index,
                                std::size_t maxTokens);

} // namespace tb::text
