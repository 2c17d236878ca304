#include "text/CorpusStats.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/Errors.h"

namespace tb::text {

std::uint64_t CorpusStats::shortest() const { return lengths.empty() ? 0 : *std::min_element(lengths.begin(), lengths.end()); }

std::uint64_t CorpusStats::longest() const { return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end()); }

std::uint64_t CorpusStats::median() const
{
    if (lengths.empty()) return 0;
    auto sorted = lengths;
    const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), mid, sorted.end());
    return *mid; // the upper median of an even count
}

double CorpusStats::mean() const { return documents ? static_cast<double>(tokens) / static_cast<double>(documents) : 0.0; }

std::uint64_t CorpusStats::longerThanWindow(std::int64_t seqLen) const
{
    const auto window = static_cast<std::uint64_t>(std::max<std::int64_t>(seqLen, 0)) + 1;
    return static_cast<std::uint64_t>(std::count_if(lengths.begin(), lengths.end(), [&](std::uint64_t n) { return n > window; }));
}

std::vector<std::uint64_t> CorpusStats::histogram(std::uint64_t width) const
{
    width = std::max<std::uint64_t>(width, 1);
    std::vector<std::uint64_t> bins(longest() / width + 1, 0);
    for (const auto n : lengths) ++bins[n / width];
    return bins;
}

CorpusStats corpusStats(const CorpusCache& cache)
{
    CorpusStats s;
    s.documents = cache.documents;
    s.tokens = cache.tokens;
    s.skippedLines = cache.skippedLines;
    s.skippedExamples = cache.skippedExamples;
    const auto starts = readDocumentStarts(cache);
    s.lengths.reserve(cache.documents);
    for (std::size_t i = 0; i + 1 < starts.size(); ++i) s.lengths.push_back(starts[i + 1] - starts[i]);
    s.lossTokens = cache.tokens;
    if (!cache.maskPath.empty()) {
        std::ifstream in(cache.maskPath, std::ios::binary);
        std::vector<char> buffer(1 << 20);
        std::uint64_t read = 0, ones = 0;
        while (in) {
            in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
            const auto n = static_cast<std::size_t>(in.gcount());
            read += n;
            ones += static_cast<std::uint64_t>(std::count(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n), 1));
        }
        if (read != cache.tokens) throw RunError("the token cache " + cache.maskPath + " is incomplete; delete " + cache.dir + " and run again");
        s.lossTokens = ones;
    }
    return s;
}

std::vector<std::string> describeCorpus(const CorpusStats& s, std::int64_t seqLen, bool chat)
{
    const auto n = [](std::uint64_t v) { return std::to_string(v); };
    std::vector<std::string> lines;
    std::string first = n(s.documents) + (chat ? " conversations, " : " examples, ") + n(s.tokens) + " tokens";
    if (chat) first += ", " + n(s.lossTokens) + " of them the assistant's (the loss is on these)";
    lines.push_back(first);
    char mean[32];
    std::snprintf(mean, sizeof mean, "%.1f", s.mean());
    lines.push_back("Lengths in tokens: shortest " + n(s.shortest()) + ", median " + n(s.median()) + ", mean " + mean
                    + ", longest " + n(s.longest()));
    const auto window = seqLen + 1;
    lines.push_back(n(s.longerThanWindow(seqLen)) + " of " + n(s.documents) + " longer than a training window of "
                    + std::to_string(window) + " tokens (data.seq_len " + std::to_string(seqLen)
                    + " + 1): trained on in pieces, never whole");
    if (s.skippedLines > 0) {
        std::string dropped = n(s.skippedLines) + (s.skippedLines == 1 ? " row" : " rows") + " dropped as bad data (data.skip_bad_lines)";
        if (!s.skippedExamples.empty()) dropped += "; the first: " + s.skippedExamples.front();
        lines.push_back(dropped);
    } else {
        lines.push_back("No rows dropped as bad data");
    }
    return lines;
}

CorpusExample readCorpusExample(const CorpusCache& cache, const std::vector<std::uint64_t>& starts, std::uint64_t index,
                                std::size_t maxTokens)
{
    CorpusExample out;
    if (index + 1 >= starts.size()) throw InputError("example " + std::to_string(index + 1) + " does not exist: the data has "
                                                     + std::to_string(starts.empty() ? 0 : starts.size() - 1) + " examples");
    const auto begin = starts[index];
    out.tokens = starts[index + 1] - begin;
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(out.tokens, maxTokens));
    const std::size_t width = cache.dtype == "uint32" ? 4 : 2;
    std::ifstream in(cache.tokensPath, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(begin * width));
    std::vector<unsigned char> raw(n * width);
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    if (!in) throw RunError("the token cache " + cache.tokensPath + " is incomplete; delete " + cache.dir + " and run again");
    out.ids.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        const unsigned char* p = raw.data() + i * width;
        // Little-endian, as the cache writes them.
        out.ids[i] = width == 4 ? static_cast<std::int32_t>(p[0] | (p[1] << 8) | (p[2] << 16) | (std::uint32_t(p[3]) << 24))
                                : static_cast<std::int32_t>(p[0] | (p[1] << 8));
    }
    if (!cache.maskPath.empty()) {
        std::ifstream mask(cache.maskPath, std::ios::binary);
        mask.seekg(static_cast<std::streamoff>(begin));
        out.mask.resize(n);
        mask.read(reinterpret_cast<char*>(out.mask.data()), static_cast<std::streamsize>(n));
        if (!mask) throw RunError("the token cache " + cache.maskPath + " is incomplete; delete " + cache.dir + " and run again");
    }
    return out;
}

} // namespace tb::text
