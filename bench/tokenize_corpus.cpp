// Tokenizing and packing a corpus into the token cache, as a run does before
// its first step: prints {"seconds", "bytes", "tokens", "documents",
// "peak_rss_bytes", "tokenizer_rss_bytes"}. The cache goes to CACHE_DIR (emptied first).
// usage: bench_tokenize_corpus TOKENIZER_JSON DATA_FILE text|jsonl|chat CACHE_DIR [EOS_ID [TEMPLATE_DIR]]
// (chat: TEMPLATE_DIR holds the tokenizer_config.json with the chat template)
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "text/ChatTemplate.h"
#include "text/Corpus.h"
#include "text/Tokenizer.h"

namespace {

// Resident memory now, from /proc/self/status (VmRSS), in bytes.
long long residentBytes()
{
    std::ifstream status("/proc/self/status");
    std::string key;
    while (status >> key) {
        if (key == "VmRSS:") {
            long long kb = 0;
            status >> kb;
            return kb * 1024;
        }
        std::getline(status, key);
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 5) {
        std::cerr << "usage: bench_tokenize_corpus TOKENIZER_JSON DATA_FILE text|jsonl CACHE_DIR [EOS_ID]\n";
        return 2;
    }
    try {
        const auto tok = tb::text::Tokenizer::fromFile(argv[1]);
        const long long afterLoad = residentBytes();
        std::filesystem::remove_all(argv[4]);
        tb::text::CorpusSpec spec;
        spec.path = argv[2];
        spec.format = argv[3];
        spec.eos = argc > 5 ? std::stoi(argv[5]) : -1;
        std::unique_ptr<tb::text::ChatTemplate> chat;
        if (spec.format == "chat") {
            if (argc < 7) throw std::runtime_error("chat needs TEMPLATE_DIR");
            const auto t = tb::text::readFolderChatTemplate(argv[6]);
            chat = std::make_unique<tb::text::ChatTemplate>(t.source, t.where);
            spec.chat = chat.get();
            spec.chatVariables = t.variables;
            spec.chatSource = t.source;
        }
        const auto t0 = std::chrono::steady_clock::now();
        const auto cache = tb::text::tokenizeCorpus(spec, tok, argv[4]);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        struct rusage usage {};
        getrusage(RUSAGE_SELF, &usage);
        std::cout << "{\"seconds\": " << seconds << ", \"bytes\": " << cache.fileBytes << ", \"tokens\": " << cache.tokens
                  << ", \"documents\": " << cache.documents << ", \"peak_rss_bytes\": " << usage.ru_maxrss * 1024LL
                  << ", \"tokenizer_rss_bytes\": " << afterLoad << "}\n";
    } catch (const std::exception& e) {
        std::cerr << "bench_tokenize_corpus: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
