#include "train/Datasets.h"

#include "train/CorpusSetup.h"
#include "config/ModelSpec.h"

#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/ByteSize.h"
#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "text/ChatTemplate.h"
#include "text/Corpus.h"
#include "text/Tokenizer.h"

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

// `maxBatches` batches of evenly spaced windows starting between firstStart
// and lastStart (the held-out tail): deterministic and seed-free.
std::vector<Batch> heldOutBatches(std::int64_t firstStart, std::int64_t lastStart, int batchSize, int maxBatches,
                                  const std::function<Batch(const torch::Tensor&)>& windowsAt)
{
    const auto count = static_cast<std::int64_t>(batchSize) * maxBatches;
    const auto starts = torch::linspace(static_cast<double>(firstStart), static_cast<double>(lastStart), count,
                                        torch::kDouble)
                            .round()
                            .to(torch::kLong);
    std::vector<Batch> batches;
    for (std::int64_t i = 0; i < count; i += batchSize) {
        batches.push_back(windowsAt(starts.narrow(0, i, std::min<std::int64_t>(batchSize, count - i))));
    }
    return batches;
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
    if (a > b) std::swap(a, b); // a+b and b+a are one pair: both held out or neither
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
    return {tokens.narrow(1, 0, T), tokens.narrow(1, 1, T), mask};
}

Batch AdditionDataset::trainBatch(int batchSize, at::Generator& gen) const
{
    std::vector<std::pair<std::uint64_t, std::uint64_t>> pairs;
    pairs.reserve(batchSize);
    // One buffer for every draw: a step allocates the same whatever it draws
    // (the derived memory plan compares steps allocation by allocation).
    auto draws = torch::empty({2 * batchSize}, torch::kLong);
    while (static_cast<int>(pairs.size()) < batchSize) {
        torch::randint_out(draws, 0, static_cast<std::int64_t>(m_limit), {2 * batchSize}, gen);
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

std::vector<std::int64_t> AdditionDataset::encodePrompt(const std::string& text) const
{
    const std::string usage = "the addition model reads prompts like \"12+34=\" (two numbers of at most "
        + std::to_string(m_digits) + " digits)";
    std::string a, b;
    std::string* current = &a;
    bool equals = false;
    for (const char c : text) {
        if (c == ' ') continue;
        if (std::isdigit(static_cast<unsigned char>(c)) && !equals) {
            current->push_back(c);
        } else if (c == '+' && current == &a) {
            current = &b;
        } else if (c == '=' && current == &b && !equals) {
            equals = true;
        } else {
            throw InputError(usage + "; this prompt has an unexpected character");
        }
    }
    if (a.empty() || b.empty() || static_cast<int>(a.size()) > m_digits || static_cast<int>(b.size()) > m_digits) {
        throw InputError(usage + "; got a prompt of another form");
    }
    std::vector<std::int64_t> ids;
    for (const auto* number : {&a, &b}) {
        // Left-padded with zeros to the task's width, as in training.
        for (int i = static_cast<int>(number->size()); i < m_digits; ++i) ids.push_back(0);
        for (const char c : *number) ids.push_back(c - '0');
        ids.push_back(number == &a ? Plus : Equals);
    }
    return ids;
}

std::string AdditionDataset::decodeCompletion(const std::vector<std::int64_t>& ids) const
{
    std::string reversed;
    for (const auto id : ids) {
        if (id < 0 || id > 9) break; // the end marker, or a token that is no digit
        reversed.push_back(static_cast<char>('0' + id));
    }
    std::string digits(reversed.rbegin(), reversed.rend());
    const auto first = digits.find_first_not_of('0');
    if (digits.empty()) return digits;
    return first == std::string::npos ? "0" : digits.substr(first);
}

TextDataset::TextDataset(const std::uint8_t* bytes, std::int64_t n, std::shared_ptr<const void> owner,
                         std::string sourceName, int seqLen, double valFraction)
    : m_owner(std::move(owner)), m_source(std::move(sourceName)), m_seqLen(seqLen)
{
    const auto valBytes = static_cast<std::int64_t>(static_cast<double>(n) * valFraction);
    m_trainEnd = n - valBytes;
    if (m_trainEnd < seqLen + 2 || valBytes < seqLen + 2) {
        throw InputError("data.path: " + m_source + " has " + std::to_string(n) + " bytes; with seq_len "
                         + std::to_string(seqLen) + " and val_fraction " + std::to_string(valFraction)
                         + " both splits need at least " + std::to_string(seqLen + 2)
                         + " bytes. Use a longer file, a shorter data.seq_len or a larger data.val_fraction");
    }
    // Never written through: the mapping is read-only.
    m_data = torch::from_blob(const_cast<std::uint8_t*>(bytes), {n}, torch::kUInt8);
}

std::unique_ptr<TextDataset> TextDataset::fromText(std::string text, std::string sourceName, int seqLen,
                                                   double valFraction)
{
    auto owned = std::make_shared<const std::string>(std::move(text));
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(owned->data());
    const auto n = static_cast<std::int64_t>(owned->size());
    return std::unique_ptr<TextDataset>(new TextDataset(bytes, n, owned, std::move(sourceName), seqLen, valFraction));
}

std::unique_ptr<TextDataset> TextDataset::fromFile(const std::string& path, int seqLen, double valFraction)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat info {};
    if (fd < 0 || ::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        if (fd >= 0) ::close(fd);
        throw InputError("data.path: cannot read " + path
                         + " (does it exist, is it a file, and may this user read it?); fix the path or remove data.path");
    }
    const auto n = static_cast<std::int64_t>(info.st_size);
    if (n == 0) {
        ::close(fd);
        return fromText({}, path, seqLen, valFraction); // reports the empty file
    }
    void* mapped = ::mmap(nullptr, static_cast<std::size_t>(n), PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);
    if (mapped == MAP_FAILED) throw InputError("data.path: cannot map " + path + " (" + std::strerror(error) + ")");
    ::madvise(mapped, static_cast<std::size_t>(n), MADV_RANDOM);
    std::shared_ptr<const void> owner(mapped, [n](const void* p) { ::munmap(const_cast<void*>(p), static_cast<std::size_t>(n)); });
    return std::unique_ptr<TextDataset>(
        new TextDataset(static_cast<const std::uint8_t*>(mapped), n, std::move(owner), path, seqLen, valFraction));
}

std::vector<std::int64_t> TextDataset::encodePrompt(const std::string& text) const
{
    if (text.empty()) throw InputError("the prompt is empty; a byte-level text model needs at least one character");
    std::vector<std::int64_t> ids;
    for (const unsigned char c : text) ids.push_back(c);
    return ids;
}

std::string TextDataset::decodeCompletion(const std::vector<std::int64_t>& ids) const
{
    std::string text;
    for (const auto id : ids) text.push_back(static_cast<char>(id & 0xff));
    return text;
}

Batch TextDataset::windows(const torch::Tensor& starts) const
{
    const auto offsets = torch::arange(m_seqLen + 1, torch::kLong);
    const auto index = starts.unsqueeze(1) + offsets.unsqueeze(0); // [B, T+1]
    const auto tokens = m_data.index({index}).to(torch::kLong);
    // Every position counts: no mask, so the loss skips a multiply by ones.
    return {tokens.narrow(1, 0, m_seqLen), tokens.narrow(1, 1, m_seqLen), {}};
}

Batch TextDataset::trainBatch(int batchSize, at::Generator& gen) const
{
    return windows(torch::randint(0, m_trainEnd - m_seqLen - 1, {batchSize}, gen, torch::kLong));
}

std::vector<Batch> TextDataset::validationBatches(int batchSize, int maxBatches) const
{
    return heldOutBatches(m_trainEnd, m_data.size(0) - m_seqLen - 1, batchSize, maxBatches,
                          [this](const torch::Tensor& starts) { return windows(starts); });
}

std::string TextDataset::describe() const
{
    return "byte-level text from " + m_source + " (" + std::to_string(m_data.size(0)) + " bytes, "
        + std::to_string(m_trainEnd) + " for training), vocab 256, " + std::to_string(m_seqLen) + " tokens per example";
}

std::unique_ptr<TokenDataset> TokenDataset::map(const std::string& path, const std::string& dtype, int vocabSize,
                                                int seqLen, const std::string& shownAs)
{
    const int width = dtype == "uint32" ? 4 : 2;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat info {};
    if (fd < 0 || ::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        if (fd >= 0) ::close(fd);
        throw InputError("data.path: cannot read " + path + " (does it exist, is it a file, and may this user read it?)");
    }
    const auto bytes = static_cast<std::int64_t>(info.st_size);
    if (bytes % width != 0) {
        ::close(fd);
        throw InputError("data.path: " + path + " has " + std::to_string(bytes) + " bytes, not a whole number of "
                         + dtype + " token ids; is data.token_dtype right (uint16 or uint32)?");
    }
    const auto n = bytes / width;
    std::unique_ptr<TokenDataset> d(new TokenDataset());
    d->m_source = shownAs;
    d->m_dtype = width == 4 ? "uint32" : "uint16";
    d->m_vocab = vocabSize;
    d->m_seqLen = seqLen;
    if (n == 0) {
        ::close(fd);
        d->m_data = torch::zeros({0}, width == 4 ? torch::kInt : torch::kShort);
        return d;
    }
    void* mapped = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);
    if (mapped == MAP_FAILED) throw InputError("data.path: cannot map " + path + " (" + std::strerror(error) + ")");
    d->m_owner = std::shared_ptr<const void>(mapped, [bytes](const void* p) {
        ::munmap(const_cast<void*>(p), static_cast<std::size_t>(bytes));
    });
    d->m_data = torch::from_blob(mapped, {n}, width == 4 ? torch::kInt : torch::kShort);
    d->m_unsignedMask = width == 4 ? 0xffffffffLL : 0xffffLL;
    // Every id inside the vocabulary, checked in chunks (a bad id would index
    // outside the embedding: a crash on the CPU, a device-side assert on a GPU).
    ::madvise(mapped, static_cast<std::size_t>(bytes), MADV_SEQUENTIAL);
    constexpr std::int64_t kChunk = 1 << 24;
    for (std::int64_t from = 0; from < n; from += kChunk) {
        const auto ids = d->m_data.narrow(0, from, std::min(kChunk, n - from)).to(torch::kLong).bitwise_and(d->m_unsignedMask);
        const auto bad = (ids >= vocabSize).nonzero();
        if (bad.size(0) > 0) {
            const auto at = bad[0][0].item<std::int64_t>();
            throw InputError("data.path: token " + std::to_string(from + at) + " of " + shownAs + " is id "
                             + std::to_string(ids[at].item<std::int64_t>()) + ", outside the model's vocabulary of "
                             + std::to_string(vocabSize) + " (ids 0 to " + std::to_string(vocabSize - 1)
                             + "); was it made with this model's tokenizer, and is data.token_dtype right?");
        }
    }
    ::madvise(mapped, static_cast<std::size_t>(bytes), MADV_RANDOM);
    return d;
}

std::unique_ptr<TokenDataset> TokenDataset::synthetic(int vocabSize, int seqLen, bool wideIds, bool withMask)
{
    const std::int64_t n = std::max<std::int64_t>(16LL * (seqLen + 2), 1024);
    const std::int64_t width = wideIds ? 4 : 2;
    auto ids = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(n * width));
    for (std::int64_t i = 0; i < n; ++i) {
        const auto id = static_cast<std::uint32_t>((i * 7 + 3) % vocabSize);
        if (wideIds) std::memcpy(ids->data() + i * 4, &id, 4);
        else {
            const auto narrow = static_cast<std::uint16_t>(id);
            std::memcpy(ids->data() + i * 2, &narrow, 2);
        }
    }
    std::unique_ptr<TokenDataset> d(new TokenDataset());
    d->m_source = "random ids";
    d->m_dtype = wideIds ? "uint32" : "uint16";
    d->m_vocab = vocabSize;
    d->m_seqLen = seqLen;
    d->m_data = torch::from_blob(ids->data(), {n}, wideIds ? torch::kInt : torch::kShort);
    d->m_owner = ids;
    d->m_unsignedMask = wideIds ? 0xffffffffLL : 0xffffLL;
    if (withMask) {
        auto mask = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) (*mask)[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 3 != 0);
        d->m_mask = torch::from_blob(mask->data(), {n}, torch::kByte);
        d->m_maskOwner = mask;
    }
    d->m_trainEnd = n / 2;
    return d;
}

std::unique_ptr<TokenDataset> TokenDataset::fromFile(const std::string& path, const std::string& dtype, int vocabSize,
                                                     int seqLen, double valFraction)
{
    auto d = map(path, dtype, vocabSize, seqLen, path);
    const auto n = d->m_data.size(0);
    const auto valIds = static_cast<std::int64_t>(static_cast<double>(n) * valFraction);
    if (n - valIds < seqLen + 2 || valIds < seqLen + 2) {
        throw InputError("data.path: " + path + " has " + std::to_string(n) + " token ids; with seq_len "
                         + std::to_string(seqLen) + " and val_fraction " + std::to_string(valFraction)
                         + " both splits need at least " + std::to_string(seqLen + 2)
                         + " ids. Use a longer file, a shorter data.seq_len or a larger data.val_fraction");
    }
    d->m_trainEnd = n - valIds;
    return d;
}

std::unique_ptr<TokenDataset> TokenDataset::fromCorpus(const text::CorpusCache& corpus, const std::string& source,
                                                       std::shared_ptr<const text::Tokenizer> tokenizer, std::int32_t eos,
                                                       int vocabSize, int seqLen, double valFraction)
{
    auto d = map(corpus.tokensPath, corpus.dtype, vocabSize, seqLen, source);
    const auto n = d->m_data.size(0);
    // The held-out split is by document: the first document that starts at or
    // after (1 - val_fraction) of the ids begins the validation split.
    const auto starts = text::readDocumentStarts(corpus);
    const double cut = static_cast<double>(n) * (1.0 - valFraction);
    std::size_t first = 0;
    while (first < corpus.documents && static_cast<double>(starts[first]) < cut) ++first;
    if (first == 0 && corpus.documents > 1) first = 1;
    const auto trainEnd = static_cast<std::int64_t>(first < corpus.documents ? starts[first] : n);
    if (trainEnd < seqLen + 2 || n - trainEnd < seqLen + 2) {
        throw InputError("data.path: " + source + " has " + std::to_string(corpus.documents) + " documents of "
                         + std::to_string(n) + " tokens in all; split by document with val_fraction "
                         + std::to_string(valFraction) + ", the training part has " + std::to_string(trainEnd)
                         + " and the held-out part " + std::to_string(n - trainEnd) + ", and each needs at least "
                         + std::to_string(seqLen + 2) + " (seq_len + 2). Use more documents, a shorter data.seq_len or "
                         + "another data.val_fraction");
    }
    d->m_trainEnd = trainEnd;
    if (!corpus.maskPath.empty()) {
        const int fd = ::open(corpus.maskPath.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat info {};
        if (fd < 0 || ::fstat(fd, &info) != 0 || info.st_size != n) {
            if (fd >= 0) ::close(fd);
            throw RunError("the token cache's loss mask " + corpus.maskPath + " does not match its ids; delete " + corpus.dir
                           + " and run again");
        }
        void* mapped = ::mmap(nullptr, static_cast<std::size_t>(n), PROT_READ, MAP_PRIVATE, fd, 0);
        const int error = errno;
        ::close(fd);
        if (mapped == MAP_FAILED) throw RunError("cannot map " + corpus.maskPath + " (" + std::strerror(error) + ")");
        d->m_maskOwner = std::shared_ptr<const void>(mapped, [n](const void* p) {
            ::munmap(const_cast<void*>(p), static_cast<std::size_t>(n));
        });
        d->m_mask = torch::from_blob(mapped, {n}, torch::kByte);
        ::madvise(mapped, static_cast<std::size_t>(n), MADV_RANDOM);
    }
    d->m_tokenizer = std::move(tokenizer);
    d->m_eos = eos;
    d->m_documents = static_cast<std::int64_t>(corpus.documents);
    d->m_heldOutDocuments = static_cast<std::int64_t>(corpus.documents - first);
    return d;
}

Batch TokenDataset::windows(const torch::Tensor& starts) const
{
    const auto offsets = torch::arange(m_seqLen + 1, torch::kLong);
    const auto index = starts.unsqueeze(1) + offsets.unsqueeze(0); // [B, T+1]
    const auto tokens = m_data.index({index}).to(torch::kLong).bitwise_and(m_unsignedMask);
    if (m_mask.defined()) {
        // A target counts where its id is an assistant token.
        const auto mask = m_mask.index({index}).narrow(1, 1, m_seqLen).to(torch::kFloat);
        return {tokens.narrow(1, 0, m_seqLen), tokens.narrow(1, 1, m_seqLen), mask};
    }
    return {tokens.narrow(1, 0, m_seqLen), tokens.narrow(1, 1, m_seqLen), {}};
}

Batch TokenDataset::trainBatch(int batchSize, at::Generator& gen) const
{
    return windows(torch::randint(0, m_trainEnd - m_seqLen - 1, {batchSize}, gen, torch::kLong));
}

std::vector<Batch> TokenDataset::validationBatches(int batchSize, int maxBatches) const
{
    return heldOutBatches(m_trainEnd, m_data.size(0) - m_seqLen - 1, batchSize, maxBatches,
                          [this](const torch::Tensor& starts) { return windows(starts); });
}

std::string TokenDataset::describe() const
{
    if (m_tokenizer) {
        return m_source + " tokenized (" + std::to_string(m_documents) + " documents, " + std::to_string(m_data.size(0))
            + " tokens; " + std::to_string(m_heldOutDocuments) + " documents held out), vocab " + std::to_string(m_vocab)
            + ", " + std::to_string(m_seqLen) + " tokens per example";
    }
    return m_dtype + " token ids from " + m_source + " (" + std::to_string(m_data.size(0)) + " ids, "
        + std::to_string(m_trainEnd) + " for training), vocab " + std::to_string(m_vocab) + ", "
        + std::to_string(m_seqLen) + " tokens per example";
}

std::vector<std::int64_t> TokenDataset::encodePrompt(const std::string& text) const
{
    if (m_tokenizer) {
        // The template's BOS, as in training; an EOS it appends would end the prompt before it starts.
        auto ids = m_tokenizer->encode(text, true);
        if (!ids.empty() && ids.back() == m_eos) ids.pop_back();
        std::vector<std::int64_t> out;
        for (const auto id : ids) {
            if (id >= m_vocab)
                throw InputError("the prompt's token " + std::to_string(id) + " is outside the model's vocabulary of "
                                 + std::to_string(m_vocab));
            out.push_back(id);
        }
        if (out.empty()) throw InputError("the prompt is empty; give some text to continue");
        return out;
    }
    auto ids = text::parseTokenIds(text, "a prompt for a token-id model", m_vocab);
    if (ids.empty()) throw InputError("the prompt is empty; give at least one token id, e.g. 1,15043");
    return ids;
}

std::vector<std::int64_t> Dataset::encodeChatPrompt(const std::string&) const
{
    throw InputError("a chat prompt needs a run of an hf model folder trained on text, jsonl or chat data, and a folder "
                     "with a chat template");
}

std::vector<std::int64_t> TokenDataset::encodeChatPrompt(const std::string& text) const
{
    if (!m_tokenizer || m_chatFolder.empty()) return Dataset::encodeChatPrompt(text);
    const auto ids = text::encodeChatPrompt(text, m_chatFolder, *m_tokenizer, m_bos);
    std::vector<std::int64_t> out;
    for (const auto id : ids) {
        if (id >= m_vocab)
            throw InputError("the prompt's token " + std::to_string(id) + " is outside the model's vocabulary of " + std::to_string(m_vocab));
        out.push_back(id);
    }
    return out;
}

bool TokenDataset::endsTurn(std::int64_t id) const
{
    return id == m_eos || (m_tokenizer && id != m_bos && m_tokenizer->isSpecial(static_cast<std::int32_t>(id)));
}

std::string TokenDataset::decodeContinuation(const std::vector<std::int64_t>& prompt, const std::vector<std::int64_t>& ids) const
{
    if (!m_tokenizer) return decodeCompletion(ids);
    // Decoded after the prompt, then the prompt's own text taken off: Llama 2
    // style decoders drop the leading space of a text's first token.
    std::vector<std::int32_t> all(prompt.begin(), prompt.end());
    const std::string before = m_tokenizer->decode(all);
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string whole = m_tokenizer->decode(all);
    if (whole.compare(0, before.size(), before) == 0) return whole.substr(before.size());
    return decodeCompletion(ids);
}

std::string TokenDataset::promptAsShown(const std::string& typed, const std::vector<std::int64_t>& ids) const
{
    if (m_tokenizer) return typed;
    std::string out;
    for (const auto id : ids) {
        if (!out.empty()) out.push_back(',');
        out += std::to_string(id);
    }
    return out;
}

std::string TokenDataset::decodeCompletion(const std::vector<std::int64_t>& ids) const
{
    if (m_tokenizer) {
        std::vector<std::int32_t> narrow(ids.begin(), ids.end());
        return m_tokenizer->decode(narrow);
    }
    // The continuation of the prompt's list ("3,10,20" + ",4,13"): prompt and
    // completion are shown joined, and a prompt always holds an id.
    std::string out;
    for (const auto id : ids) out += ',' + std::to_string(id);
    return out;
}

std::string tokenizingProgressText(const std::string& shown, std::uint64_t done, std::uint64_t total)
{
    const int percent = total ? static_cast<int>(done * 100 / total) : 100;
    return "tokenizing " + shown + ": " + std::to_string(percent) + "% ("
        + byteSizeText(static_cast<std::int64_t>(done)) + " of " + byteSizeText(static_cast<std::int64_t>(total)) + ")";
}

int datasetVocabSize(const RunConfig& config)
{
    if (config.model.type == "hf") return static_cast<int>(readHfArchitecture(resolvedModelPath(config)).vocabSize);
    return builtInVocabSize(config);
}

std::string bundledSampleFile(const std::string& root)
{
    // Written beside the cache so it is keyed like any file; rewritten only when it differs.
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    const std::string path = (std::filesystem::path(root) / "bundled-sample.txt").string();
    const std::string text = bundledSampleText();
    if (std::filesystem::file_size(path, ec) != text.size()) {
        const std::string partial = path + ".partial-" + std::to_string(::getpid());
        {
            std::ofstream out(partial, std::ios::binary | std::ios::trunc);
            out << text;
            if (!out) throw RunError("cannot write " + partial);
        }
        std::filesystem::rename(partial, path, ec);
        if (ec) throw RunError("cannot write " + path + " (" + ec.message() + ")");
    }
    return path;
}

namespace {

// An hf model's text or jsonl data: tokenized with the folder's tokenizer into
// the token cache (once), then mapped like a token file.
std::unique_ptr<Dataset> tokenizedDataset(const RunConfig& config, const DataPreparation& prep)
{
    const auto& d = config.data;
    const std::string folder = resolvedModelPath(config);
    const std::string root = prep.tokenCacheRoot.empty() ? text::defaultTokenCacheRoot() : prep.tokenCacheRoot;
    auto setup = corpusSetupFor(config, root);
    auto tokenizer = setup.tokenizer;
    const auto& spec = setup.spec;
    const std::string& shown = setup.shown;
    auto say = [&](const std::string& severity, const std::string& message) {
        if (prep.onEvent) prep.onEvent(severity, "tokenize", message);
    };
    const auto started = std::chrono::steady_clock::now();
    auto last = started - std::chrono::seconds(10);
    int lastTenth = -1;
    const auto corpus = text::tokenizeCorpus(spec, *tokenizer, root,
        [&](std::uint64_t done, std::uint64_t total) {
            const auto now = std::chrono::steady_clock::now();
            const int tenth = total ? static_cast<int>(done * 10 / total) : 10;
            if (tenth == lastTenth || (now - last < std::chrono::seconds(2) && done < total)) return;
            lastTenth = tenth;
            last = now;
            say("progress", tokenizingProgressText(shown, done, total));
        },
        prep.cancel);
    if (corpus.reused) {
        say("info", "tokenized " + shown + " before: " + std::to_string(corpus.documents) + " documents, "
                        + std::to_string(corpus.tokens) + " tokens (token cache " + corpus.dir + ")");
    } else {
        char rate[64];
        std::snprintf(rate, sizeof rate, "%.1f s, %.1f MB/s", corpus.seconds,
                      corpus.seconds > 0 ? corpus.fileBytes / corpus.seconds / 1e6 : 0.0);
        say("info", "tokenized " + shown + ": " + std::to_string(corpus.documents) + (d.source == "chat" ? " conversations, " : " documents, ")
                        + std::to_string(corpus.tokens) + " tokens in " + rate + " (token cache " + corpus.dir + ")");
    }
    if (corpus.skippedLines > 0) {
        std::string examples;
        for (const auto& e : corpus.skippedExamples) examples += (examples.empty() ? "" : "; ") + e;
        say("warning", "skipped " + std::to_string(corpus.skippedLines) + " bad line" + (corpus.skippedLines == 1 ? "" : "s")
                           + " of " + shown + " (data.skip_bad_lines): " + examples
                           + (corpus.skippedLines > corpus.skippedExamples.size() ? "; ..." : ""));
    }
    auto dataset = TokenDataset::fromCorpus(corpus, shown, std::move(tokenizer), spec.eos, datasetVocabSize(config),
                                            effectiveSeqLen(config), d.valFraction);
    dataset->setChatFolder(folder, spec.bos);
    return dataset;
}

} // namespace

std::unique_ptr<Dataset> makeDataset(const RunConfig& config, const DataPreparation& prep)
{
    const auto& d = config.data;
    if (d.source == "addition") return std::make_unique<AdditionDataset>(d.digits, d.valFraction);
    if (d.source == "tokens") {
        return TokenDataset::fromFile(resolvedDataPath(config), d.tokenDtype, datasetVocabSize(config),
                                      effectiveSeqLen(config), d.valFraction);
    }
    if (config.model.type == "hf" && (d.source == "text" || d.source == "jsonl" || d.source == "chat")) {
        return tokenizedDataset(config, prep);
    }
    if (d.path.empty()) {
        return TextDataset::fromText(bundledSampleText(), "the bundled sample text", effectiveSeqLen(config),
                                     d.valFraction);
    }
    return TextDataset::fromFile(resolvedDataPath(config), effectiveSeqLen(config), d.valFraction);
}

} // namespace tb
