#include "train/CorpusSetup.h"

#include "train/SampleText.h"

namespace tb {

CorpusSetup corpusSetupFor(const RunConfig& config, const std::string& tokenCacheRoot,
                           std::shared_ptr<const text::Tokenizer> tokenizer)
{
    const auto& d = config.data;
    const std::string folder = resolvedModelPath(config);
    CorpusSetup s;
    s.tokenizer = tokenizer ? std::move(tokenizer) : std::make_shared<const text::Tokenizer>(text::Tokenizer::fromModelFolder(folder));
    const auto special = text::readFolderSpecialTokens(folder, *s.tokenizer);
    s.spec.format = d.source;
    s.spec.field = d.field;
    s.spec.skipBadLines = d.skipBadLines;
    s.spec.eos = special.eos;
    s.spec.bos = special.bos;
    if (d.source == "chat") {
        const auto folderTemplate = text::readFolderChatTemplate(folder);
        s.chat = std::make_unique<text::ChatTemplate>(folderTemplate.source, folderTemplate.where);
        s.spec.chat = s.chat.get();
        s.spec.chatVariables = folderTemplate.variables;
        s.spec.chatSource = folderTemplate.source;
    }
    const std::string root = tokenCacheRoot.empty() ? text::defaultTokenCacheRoot() : tokenCacheRoot;
    if (d.path.empty()) {
        s.spec.path = bundledSampleFile(root);
        s.shown = "the bundled sample text";
    } else {
        s.spec.path = resolvedDataPath(config);
        s.shown = s.spec.path;
    }
    return s;
}

} // namespace tb
