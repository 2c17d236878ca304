// A tiny Hugging Face folder's tokenizer for the window's tests, written without Python.
#pragma once

#include <QByteArray>
#include <QDir>
#include <QFile>
#include <QString>

// A small Llama folder with a BPE tokenizer of 16 ids (<s>, </s>, the
// letters of "hello world", their merges to "hello"), its template adding
// <s>, and tokenizer_config.json as given.
inline void writeTinyTokenizerFolder(const QString& folder, const QByteArray& tokenizerConfig)
{
    QDir().mkpath(folder);
    const auto write = [](const QString& path, const QByteArray& text) {
        QFile f(path);
        if (f.open(QIODevice::WriteOnly)) f.write(text);
    };
    write(folder + "/config.json", R"({"model_type": "llama", "vocab_size": 16, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 256})");
    write(folder + "/tokenizer.json", R"({"version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false},
                         {"id": 1, "content": "</s>", "special": true, "normalized": false}],
        "normalizer": null,
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": false},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
        "decoder": {"type": "Fuse"},
        "model": {"type": "BPE", "unk_token": null, "vocab": {"<s>": 0, "</s>": 1, "h": 2, "e": 3, "l": 4, "o": 5,
            " ": 6, "w": 7, "r": 8, "d": 9, "he": 10, "ll": 11, "hell": 12, "hello": 13, "\n": 14, ".": 15},
            "merges": ["h e", "l l", "he ll", "hell o"]}})");
    write(folder + "/tokenizer_config.json", tokenizerConfig);
}
