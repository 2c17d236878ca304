#include "train/Datasets.h"

#include <fstream>
#include <sstream>

namespace tb {
namespace {

// splitmix64: a cheap, well-mixed hash for assigning pairs to splits.
std::uint64_t mix(std::uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

} // namespace

AdditionDataset::AdditionDataset(int digits, double valFraction)
    : m_digits(digits), m_valFraction(valFraction), m_limit(1)
{
    for (int i = 0; i < digits; ++i) m_limit *= 10;
}

bool AdditionDataset::isHeldOut(std::uint64_t a, std::uint64_t b) const
{
    // The split depends on the pair only, not on the training seed, so runs
    // with different seeds are evaluated on the same held-out sums.
    const auto h = mix(a * 0x100000001b3ULL ^ mix(b));
    return static_cast<double>(h % 1000000ULL) < m_valFraction * 1000000.0;
}

std::vector<std::int64_t> AdditionDataset::encode(std::uint64_t a, std::uint64_t b) const
{
    std::vector<std::int64_t> seq;
    seq.reserve(seqLen() + 1);
    auto digitsOf = [&](std::uint64_t v, int count, bool reversed) {
        std::vector<std::int64_t> out(count);
        for (int i = 0; i < count; ++i) {
            out[reversed ? i : count - 1 - i] = static_cast<std::int64_t>(v % 10);
            v /= 10;
        }
        return out;
    };
    for (auto d : digitsOf(a, m_digits, false)) seq.push_back(d);
    seq.push_back(Plus);
    for (auto d : digitsOf(b, m_digits, false)) seq.push_back(d);
    seq.push_back(Equals);
    for (auto d : digitsOf(a + b, m_digits + 1, true)) seq.push_back(d);
    seq.push_back(End);
    return seq;
}

Batch AdditionDataset::makeBatch(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& pairs) const
{
    const int T = seqLen();
    const auto B = static_cast<std::int64_t>(pairs.size());
    auto tokens = torch::empty({B, T + 1}, torch::kLong);
    auto* p = tokens.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < B; ++i) {
        const auto seq = encode(pairs[i].first, pairs[i].second);
        std::copy(seq.begin(), seq.end(), p + i * (T + 1));
    }
    auto mask = torch::zeros({B, T});
    // Targets from the first answer digit (predicted at '=') to the end marker.
    mask.narrow(1, 2 * m_digits + 1, T - (2 * m_digits + 1)).fill_(1.0);
    return {tokens.narrow(1, 0, T).contiguous(), tokens.narrow(1, 1, T).contiguous(), mask};
}

Batch AdditionDataset::trainBatch(int batchSize, at::Generator& gen) const
{
    std::vector<std::pair<std::uint64_t, std::uint64_t>> pairs;
    pairs.reserve(batchSize);
    while (static_cast<int>(pairs.size()) < batchSize) {
        const auto draws = torch::randint(0, static_cast<std::int64_t>(m_limit), {2 * batchSize}, gen, torch::kLong);
        const auto* v = draws.data_ptr<std::int64_t>();
        for (int i = 0; i + 1 < 2 * batchSize && static_cast<int>(pairs.size()) < batchSize; i += 2) {
            const auto a = static_cast<std::uint64_t>(v[i]), b = static_cast<std::uint64_t>(v[i + 1]);
            if (!isHeldOut(a, b)) pairs.emplace_back(a, b);
        }
    }
    return makeBatch(pairs);
}

std::vector<Batch> AdditionDataset::validationBatches(int batchSize, int maxBatches) const
{
    // A fixed stream of held-out pairs, independent of the training seed.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> pairs;
    const std::size_t wanted = static_cast<std::size_t>(batchSize) * maxBatches;
    std::uint64_t state = 0x5eedULL;
    const std::uint64_t total = m_limit * m_limit;
    for (std::uint64_t tries = 0; pairs.size() < wanted && tries < 50 * wanted + 1000000; ++tries) {
        state = mix(state);
        const std::uint64_t a = state % m_limit, b = mix(state ^ 0xabcdefULL) % m_limit;
        if (isHeldOut(a, b)) pairs.emplace_back(a, b);
        if (total < 1000000 && pairs.size() >= static_cast<std::size_t>(m_valFraction * total + 1)) break;
    }
    std::vector<Batch> batches;
    for (std::size_t i = 0; i < pairs.size(); i += batchSize) {
        const auto end = std::min(pairs.size(), i + batchSize);
        batches.push_back(makeBatch({pairs.begin() + i, pairs.begin() + end}));
    }
    return batches;
}

std::string AdditionDataset::describe() const
{
    return "addition of " + std::to_string(m_digits) + "-digit numbers (answers reversed), vocab 13, "
        + std::to_string(seqLen()) + " tokens per example";
}

TextDataset::TextDataset(std::string bytes, std::string sourceName, int seqLen, double valFraction)
    : m_source(std::move(sourceName)), m_seqLen(seqLen)
{
    const auto n = static_cast<std::int64_t>(bytes.size());
    const auto valBytes = static_cast<std::int64_t>(static_cast<double>(n) * valFraction);
    m_trainEnd = n - valBytes;
    if (m_trainEnd < seqLen + 2 || valBytes < seqLen + 2) {
        throw InputError("data.path: " + m_source + " has " + std::to_string(n) + " bytes; with seq_len "
                         + std::to_string(seqLen) + " and val_fraction " + std::to_string(valFraction)
                         + " both splits need at least " + std::to_string(seqLen + 2)
                         + " bytes. Use a longer file, a shorter data.seq_len or a larger data.val_fraction");
    }
    m_data = torch::from_blob(bytes.data(), {n}, torch::kUInt8).to(torch::kLong);
}

Batch TextDataset::windows(const torch::Tensor& starts) const
{
    const auto offsets = torch::arange(m_seqLen + 1, torch::kLong);
    const auto index = starts.unsqueeze(1) + offsets.unsqueeze(0); // [B, T+1]
    const auto tokens = m_data.index({index});
    // Every position counts: no mask, so the loss skips a multiply by ones.
    return {tokens.narrow(1, 0, m_seqLen).contiguous(), tokens.narrow(1, 1, m_seqLen).contiguous(), {}};
}

Batch TextDataset::trainBatch(int batchSize, at::Generator& gen) const
{
    return windows(torch::randint(0, m_trainEnd - m_seqLen - 1, {batchSize}, gen, torch::kLong));
}

std::vector<Batch> TextDataset::validationBatches(int batchSize, int maxBatches) const
{
    // Evenly spaced windows over the held-out tail: deterministic and seed-free.
    const auto n = m_data.size(0);
    const auto firstStart = m_trainEnd, lastStart = n - m_seqLen - 1;
    const auto count = static_cast<std::int64_t>(batchSize) * maxBatches;
    const auto starts = torch::linspace(static_cast<double>(firstStart), static_cast<double>(lastStart), count,
                                        torch::kDouble)
                            .round()
                            .to(torch::kLong);
    std::vector<Batch> batches;
    for (std::int64_t i = 0; i < count; i += batchSize) {
        batches.push_back(windows(starts.narrow(0, i, std::min<std::int64_t>(batchSize, count - i))));
    }
    return batches;
}

std::string TextDataset::describe() const
{
    return "byte-level text from " + m_source + " (" + std::to_string(m_data.size(0)) + " bytes, "
        + std::to_string(m_trainEnd) + " for training), vocab 256, " + std::to_string(m_seqLen) + " tokens per example";
}

std::unique_ptr<Dataset> makeDataset(const RunConfig& config)
{
    const auto& d = config.data;
    if (d.source == "addition") return std::make_unique<AdditionDataset>(d.digits, d.valFraction);
    std::string bytes, source;
    if (d.path.empty()) {
        bytes = bundledSampleText();
        source = "the bundled sample text";
    } else {
        source = resolvedDataPath(config);
        std::ifstream in(source, std::ios::binary);
        if (!in) {
            throw InputError("data.path: cannot read " + source
                             + " (does it exist, and may this user read it?); fix the path or remove data.path");
        }
        std::stringstream buffer;
        buffer << in.rdbuf();
        bytes = buffer.str();
    }
    return std::make_unique<TextDataset>(std::move(bytes), source, effectiveSeqLen(config), d.valFraction);
}

} // namespace tb
