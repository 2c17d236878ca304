// trainbench-cli tokenize: text -> ids (or ids -> text) with a model folder's tokenizer.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <unistd.h>

#include "Command.h"
#include "common/Errors.h"
#include "text/Regex.h"
#include "text/Tokenizer.h"

namespace tb::cli {
namespace {

using nlohmann::json;

std::string readAll(std::istream& in)
{
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string idsLine(const std::vector<std::int32_t>& ids)
{
    std::string out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) out.push_back(' ');
        out += std::to_string(ids[i]);
    }
    return out;
}

int tokenize(const Args& args)
{
    const auto model = args.value("--model");
    const auto file = args.value("--tokenizer");
    if (model && file) throw InputError("'tokenize' takes --model DIR or --tokenizer FILE, not both");
    if (!model && !file) throw InputError("'tokenize' needs --model DIR (a model folder) or --tokenizer FILE (a tokenizer.json, or a SentencePiece .model)");
    const auto tok = model ? text::Tokenizer::fromModelFolder(*model) : text::Tokenizer::fromFile(*file);
    const bool special = args.flag("--add-special-tokens");
    const bool decode = args.flag("--decode");
    const bool jsonl = args.flag("--jsonl");
    const auto literal = args.value("--text");
    if (decode && special) throw InputError("--add-special-tokens applies to encoding; with --decode, leave it out");

    std::string input;
    if (literal) input = *literal;
    else {
        std::ios::sync_with_stdio(false);
        input = readAll(std::cin);
    }

    if (!jsonl) {
        if (!decode) {
            std::cout << idsLine(tok.encode(input, special)) << "\n";
            return kExitOk;
        }
        const auto parsed = text::parseTokenIds(input, "the input of --decode");
        const std::vector<std::int32_t> ids(parsed.begin(), parsed.end());
        const std::string out = tok.decode(ids);
        std::cout << out;
        if (isatty(STDOUT_FILENO)) std::cout << "\n"; // a terminal gets its prompt on the next line; a pipe gets the text exactly
        return kExitOk;
    }

    std::size_t lineNo = 0, begin = 0;
    std::string out;
    while (begin < input.size()) {
        std::size_t end = input.find('\n', begin);
        if (end == std::string::npos) end = input.size();
        std::string line = input.substr(begin, end - begin);
        begin = end + 1;
        ++lineNo;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const std::string where = "line " + std::to_string(lineNo);
        json value;
        try {
            value = json::parse(line);
        } catch (const json::parse_error& e) {
            throw InputError(where + ": not valid JSON (" + std::string(e.what()).substr(0, 160) + "); each line must be " +
                             (decode ? "a JSON array of ids" : "one JSON string"));
        }
        if (!decode) {
            if (!value.is_string()) throw InputError(where + ": each line must be one JSON string, like \"some text\"");
            const auto ids = tok.encode(value.get_ref<const std::string&>(), special);
            out = "[";
            for (std::size_t i = 0; i < ids.size(); ++i) {
                if (i) out += ",";
                out += std::to_string(ids[i]);
            }
            out += "]\n";
        } else {
            if (!value.is_array()) throw InputError(where + ": each line must be a JSON array of ids, like [1, 2, 3]");
            std::vector<std::int32_t> ids;
            for (const auto& v : value) {
                if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 0x7FFFFFFF)
                    throw InputError(where + ": " + text::clipForMessage(v.dump(), 40) + " is not a token id (a non-negative integer)");
                ids.push_back(v.get<std::int32_t>());
            }
            std::string text;
            try {
                text = tok.decode(ids);
            } catch (const InputError& e) {
                throw InputError(where + ": " + e.what());
            }
            out = json(text).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        }
        std::cout << out;
    }
    std::cout.flush();
    return kExitOk;
}

const CommandRegistration tokenizeRegistration{Command{
    "tokenize",
    "Turn text into token ids with a model folder's tokenizer (tokenizer.json, else tokenizer.model), or ids back into text (--decode). Input comes "
    "from standard input, or --text. Without --jsonl the whole input is one text and the output is one line of ids; "
    "with --jsonl each input line is a JSON string (or, with --decode, a JSON array of ids) and each output line its "
    "result. Special-token text such as <|im_start|> becomes its token either way; --add-special-tokens adds the "
    "tokenizer's BOS/EOS as its template says. Text must be UTF-8.",
    "(--model DIR | --tokenizer FILE) [--add-special-tokens] [--decode] [--jsonl] [--text T]",
    {{"--model", true, "a model folder holding tokenizer.json or tokenizer.model", "DIR"},
     {"--tokenizer", true, "a tokenizer.json file, or a SentencePiece .model (tokenizer_config.json beside it is read)", "FILE"},
     {"--add-special-tokens", false, "add the template's special tokens (BOS/EOS)"},
     {"--decode", false, "ids in, text out"},
     {"--jsonl", false, "one JSON value per line, in and out"},
     {"--text", true, "the input, instead of standard input", "T", true}},
    &tokenize,
    0}};

} // namespace
} // namespace tb::cli
