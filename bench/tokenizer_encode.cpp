// One side of bench/tokenizer_throughput.py: encodes a file's chunks with
// Trainbench's tokenizer on one thread and prints
//   {"seconds": S, "bytes": B, "tokens": N, "load_seconds": L}
// usage: bench_tokenizer_encode TOKENIZER_JSON TEXT_FILE CHUNK_BYTES
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "text/Tokenizer.h"
#include "text/Unicode.h"

int main(int argc, char** argv)
{
    if (argc != 4) {
        std::cerr << "usage: bench_tokenizer_encode TOKENIZER_JSON TEXT_FILE CHUNK_BYTES\n";
        return 2;
    }
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const auto tok = tb::text::Tokenizer::fromFile(argv[1]);
    const double load = std::chrono::duration<double>(clock::now() - t0).count();
    std::ifstream in(argv[2], std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t chunk = std::stoul(argv[3]);
    // The same chunks as the reference side: cut at the first line break after
    // CHUNK_BYTES, so no chunk splits a character.
    std::size_t tokens = 0;
    const auto t1 = clock::now();
    for (std::size_t at = 0; at < text.size();) {
        std::size_t end = text.find('\n', std::min(text.size(), at + chunk));
        end = end == std::string::npos ? text.size() : end + 1;
        tokens += tok.encode(std::string_view(text).substr(at, end - at), false).size();
        at = end;
    }
    const double seconds = std::chrono::duration<double>(clock::now() - t1).count();
    std::cout << "{\"seconds\": " << seconds << ", \"bytes\": " << text.size() << ", \"tokens\": " << tokens
              << ", \"load_seconds\": " << load << "}\n";
    return 0;
}
