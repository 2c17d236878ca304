// trainbench-cli data: what a config's tokenized data holds, as the run sees it.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "common/Errors.h"
#include "config/RunConfig.h"
#include "text/CorpusStats.h"
#include "train/CorpusSetup.h"
#include "train/Datasets.h"

namespace tb::cli {
namespace {

using nlohmann::json;

int dataCommand(const Args& args)
{
    const auto path = args.value("--config");
    if (!path) throw InputError("'data' needs --config FILE");
    const RunConfig c = loadConfigFile(*path);
    if (c.model.type != "hf" || (c.data.source != "text" && c.data.source != "jsonl" && c.data.source != "chat")) {
        throw InputError("'data' describes text, jsonl or chat data tokenized with a model folder's tokenizer (model.type \"hf\"); "
                         "this config's data is \"" + c.data.source + "\" for a " + c.model.type + " model");
    }
    const auto example = args.integer("--example", 1, std::int64_t{1} << 40);
    const bool asJson = args.flag("--json"), lengths = args.flag("--lengths");
    auto setup = corpusSetupFor(c, "");
    const auto corpus = text::tokenizeCorpus(setup.spec, *setup.tokenizer, text::defaultTokenCacheRoot(),
                                             [&](std::uint64_t done, std::uint64_t total) {
                                                 if (done == total) return;
                                                 std::fprintf(stderr, "%s\n", tokenizingProgressText(setup.shown, done, total).c_str());
                                             });
    const auto stats = text::corpusStats(corpus);
    const int seqLen = effectiveSeqLen(c);
    const bool chat = c.data.source == "chat";
    if (example) {
        const auto starts = text::readDocumentStarts(corpus);
        const auto e = text::readCorpusExample(corpus, starts, static_cast<std::uint64_t>(*example - 1), 1u << 20);
        if (asJson) {
            json out{{"example", *example}, {"tokens", e.tokens}, {"ids", e.ids}, {"text", setup.tokenizer->decode(e.ids)}};
            if (chat) out["mask"] = e.mask;
            std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
            return kExitOk;
        }
        std::cout << "example " << *example << " of " << stats.documents << ": " << e.tokens << " tokens"
                  << (chat ? "; the loss is on the text between [[ and ]]" : "") << "\n";
        // The text, with the loss-bearing runs marked.
        std::size_t i = 0;
        while (i < e.ids.size()) {
            const bool trained = chat && e.mask[i];
            std::size_t j = i;
            while (j < e.ids.size() && (chat && e.mask[j]) == trained) ++j;
            const std::vector<std::int32_t> run(e.ids.begin() + static_cast<std::ptrdiff_t>(i), e.ids.begin() + static_cast<std::ptrdiff_t>(j));
            std::cout << (trained ? "[[" : "") << setup.tokenizer->decode(run) << (trained ? "]]" : "");
            i = j;
        }
        std::cout << "\n";
        return kExitOk;
    }
    const auto width = std::max<std::uint64_t>(1, (stats.longest() + 31) / 32);
    if (asJson) {
        json out{{"file", setup.shown},
                 {"format", c.data.source},
                 {"examples", stats.documents},
                 {"tokens", stats.tokens},
                 {"loss_tokens", stats.lossTokens},
                 {"shortest", stats.shortest()},
                 {"median", stats.median()},
                 {"mean", stats.mean()},
                 {"longest", stats.longest()},
                 {"seq_len", seqLen},
                 {"longer_than_window", stats.longerThanWindow(seqLen)},
                 {"skipped_rows", stats.skippedLines},
                 {"skipped_examples", stats.skippedExamples},
                 {"histogram", {{"bin_tokens", width}, {"examples", stats.histogram(width)}}},
                 {"token_cache", corpus.dir},
                 {"reused", corpus.reused}};
        if (lengths) out["lengths"] = stats.lengths;
        std::cout << out.dump(2) << "\n";
        return kExitOk;
    }
    // The sentences the window's dataset browser shows.
    std::printf("%s (%s)\n", setup.shown.c_str(), c.data.source.c_str());
    for (const auto& line : text::describeCorpus(stats, seqLen, chat)) std::printf("%s\n", line.c_str());
    std::printf("Token cache: %s (%s)\n", corpus.dir.c_str(), corpus.reused ? "reused" : "tokenized now");
    if (lengths) {
        for (const auto n : stats.lengths) std::printf("%llu\n", static_cast<unsigned long long>(n));
    }
    return kExitOk;
}

const CommandRegistration dataRegistration{Command{
    "data",
    "Describe a config's text, jsonl or chat data as a run trains on it: tokenized with the model folder's tokenizer "
    "(into the token cache, once), the number of examples and tokens, their lengths, how many are longer than a "
    "training window, how many rows were dropped as bad data; or one example with its loss-bearing tokens marked.",
    "--config FILE [--json] [--lengths] [--example N]",
    {{"--config", true, "the experiment config (JSON)", "FILE"},
     {"--json", false, "print JSON (with a histogram of lengths)"},
     {"--lengths", false, "also every example's length in tokens, in file order"},
     {"--example", true, "print example N (from 1) instead: its text, the loss-bearing part between [[ and ]]", "N"}},
    &dataCommand}};

} // namespace
} // namespace tb::cli
