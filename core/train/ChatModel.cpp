// A conversation with a trained run or a Hugging Face folder (ModelTools.h).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/Errors.h"
#include "config/HfArchitecture.h"
#include "text/ChatTemplate.h"
#include "text/Corpus.h"
#include "text/Tokenizer.h"
#include "train/Datasets.h"
#include "train/ModelIo.h"
#include "train/ModelTools.h"

namespace tb {
namespace {

// A folder's playground reads at most this many tokens of the conversation:
// every token is a forward pass over all of them (no key/value cache).
constexpr std::int64_t kFolderWindow = 4096;

bool folderHasChatTemplate(const std::string& folder)
{
    try {
        (void)text::readFolderChatTemplate(folder);
        return true;
    } catch (const InputError&) {
        return false;
    }
}

std::string withThousands(std::int64_t n)
{
    const std::string digits = std::to_string(n);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
        out.push_back(digits[i]);
    }
    return out;
}

// Text decoded so far may end inside a character (byte tokens): that part waits.
bool endsMidCharacter(const std::string& s)
{
    static const std::string replacement = "\xEF\xBF\xBD";
    return s.size() >= replacement.size() && s.compare(s.size() - replacement.size(), replacement.size(), replacement) == 0;
}

} // namespace

struct ChatModel::Impl {
    std::shared_ptr<CausalLmImpl> model;
    std::unique_ptr<Dataset> data;                    // a run's: its prompts, turn ends and decoding
    std::shared_ptr<const text::Tokenizer> tokenizer; // a folder's, or a run's tokenized corpus's
    std::string chatFolder;                           // where the chat template is, when there is one
    std::int32_t bos = -1, eos = -1;
    std::vector<std::int64_t> stops; // a folder's eos_token_id
    std::int64_t vocab = 0;
    int window = 0;
    std::string name;

    bool endsTurn(std::int64_t id) const
    {
        if (data) return chatFolder.empty() ? id == data->endToken() : data->endsTurn(id);
        return std::find(stops.begin(), stops.end(), id) != stops.end();
    }

    std::vector<std::int64_t> encode(const std::vector<ChatMessage>& messages) const
    {
        if (!chatFolder.empty()) {
            nlohmann::ordered_json list = nlohmann::ordered_json::array();
            for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
            const auto ids = text::encodeChatConversation(list, chatFolder, *tokenizer, bos);
            return {ids.begin(), ids.end()};
        }
        const std::string& last = messages.back().content;
        if (data) return data->encodePrompt(last);
        auto ids = tokenizer->encode(last, true);
        if (!ids.empty() && ids.back() == eos) ids.pop_back(); // an EOS the template appends would end the prompt
        return {ids.begin(), ids.end()};
    }

    // The reply's text: the generated ids without the one that ended the turn.
    std::string decode(const std::vector<std::int64_t>& prompt, const std::vector<std::int64_t>& reply) const
    {
        if (!chatFolder.empty()) return tokenizer->decode(std::vector<std::int32_t>(reply.begin(), reply.end()), true);
        if (data) return data->decodeContinuation(prompt, reply);
        std::vector<std::int32_t> all(prompt.begin(), prompt.end());
        const std::string before = tokenizer->decode(all, true);
        all.insert(all.end(), reply.begin(), reply.end());
        const std::string whole = tokenizer->decode(all, true);
        if (whole.compare(0, before.size(), before) == 0) return whole.substr(before.size());
        return tokenizer->decode(std::vector<std::int32_t>(reply.begin(), reply.end()), true);
    }
};

ChatModel::ChatModel() : m(std::make_unique<Impl>()) {}
ChatModel::~ChatModel() = default;

std::unique_ptr<ChatModel> ChatModel::fromRun(const RunConfig& config, const std::string& checkpoint, const std::string& name)
{
    std::unique_ptr<ChatModel> out(new ChatModel);
    auto& m = *out->m;
    m.data = makeDataset(config);
    m.model = openTrainedModel(config, *m.data, checkpoint);
    m.window = m.data->seqLen();
    m.vocab = m.data->vocabSize();
    m.eos = static_cast<std::int32_t>(m.data->endToken());
    m.name = name;
    if (const auto* tokens = dynamic_cast<const TokenDataset*>(m.data.get())) {
        m.tokenizer = tokens->tokenizer();
        m.bos = tokens->bos();
        if (m.tokenizer && !tokens->chatFolder().empty() && folderHasChatTemplate(tokens->chatFolder())) m.chatFolder = tokens->chatFolder();
    }
    return out;
}

std::unique_ptr<ChatModel> ChatModel::fromFolder(const std::string& folder, const std::string& precision, const std::string& quantize)
{
    const auto arch = readHfArchitecture(folder);
    if (!text::Tokenizer::folderHasTokenizer(folder))
        throw InputError(folder + " has no tokenizer.json or tokenizer.model, so a message cannot be tokenized; "
                                  "chat with a folder that has its tokenizer, or with a run trained on it");
    std::unique_ptr<ChatModel> out(new ChatModel);
    auto& m = *out->m;
    auto tokenizer = std::make_shared<text::Tokenizer>(text::Tokenizer::fromModelFolder(folder));
    const auto special = text::readFolderSpecialTokens(folder, *tokenizer);
    m.tokenizer = tokenizer;
    m.bos = special.bos;
    m.eos = special.eos;
    m.window = static_cast<int>(std::min(arch.maxPositions, kFolderWindow));
    m.vocab = arch.vocabSize;
    m.model = openFolderModel(folder, arch, precision, quantize, m.window);
    m.stops = folderEosTokens(folder);
    if (m.stops.empty() && special.eos >= 0) m.stops.push_back(special.eos);
    if (folderHasChatTemplate(folder)) m.chatFolder = folder;
    m.name = folder + " (" + precision + (quantize == "none" ? "" : ", " + quantize) + ")";
    return out;
}

bool ChatModel::hasChatTemplate() const { return !m->chatFolder.empty(); }
int ChatModel::window() const { return m->window; }

std::string ChatModel::describe() const
{
    return m->name + ": " + (hasChatTemplate() ? "chat template" : "no chat template, the last message is continued on its own")
           + ", window " + withThousands(m->window) + " tokens";
}

ChatReply ChatModel::reply(const std::vector<ChatMessage>& messages, const GenerationSettings& settings,
                           const std::function<void(const std::string&)>& onText, const std::atomic<bool>* stop)
{
    validateGenerationSettings(settings);
    if (messages.empty() || messages.back().role != "user") throw InputError("the conversation must end with the user's message");
    for (const auto& msg : messages) {
        if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
            throw InputError("a message's role must be system, user or assistant, got \"" + msg.role.substr(0, 40) + "\"");
    }
    if (messages.back().content.empty()) throw InputError("the message is empty; write something to send");
    const auto started = std::chrono::steady_clock::now();
    const auto prompt = m->encode(messages);
    if (prompt.empty()) throw InputError("the message reads as no tokens; write something to send");
    for (const auto id : prompt) {
        if (id < 0 || id >= m->vocab)
            throw InputError("the conversation's token " + std::to_string(id) + " is outside the model's vocabulary of " + std::to_string(m->vocab));
    }
    ChatReply out;
    out.promptTokens = static_cast<std::int64_t>(prompt.size());
    torch::NoGradGuard noGrad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(settings.seed);
    std::vector<std::int64_t> ids = prompt;
    std::string shown;
    const auto window = static_cast<std::size_t>(m->window);
    for (int i = 0; i < settings.maxNewTokens; ++i) {
        if (stop && stop->load()) {
            out.end = ChatReply::End::Stopped;
            break;
        }
        const auto from = ids.size() > window ? ids.size() - window : 0;
        if (from > 0) out.promptCut = true;
        const auto input = torch::tensor(std::vector<std::int64_t>(ids.begin() + std::ptrdiff_t(from), ids.end()), torch::kLong);
        const auto logits = m->model->forward(input.unsqueeze(0)).select(1, -1).squeeze(0).to(torch::kFloat);
        const std::int64_t next = pickNextToken(logits, ids, settings, gen);
        out.ids.push_back(next);
        ids.push_back(next);
        if (m->endsTurn(next)) {
            out.end = ChatReply::End::EndOfTurn;
            break;
        }
        if (onText && (!m->data || m->data->completionGrows())) {
            const auto text = m->decode(prompt, out.ids);
            if (!endsMidCharacter(text) && text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
                onText(text.substr(shown.size()));
                shown = text;
            }
        }
    }
    if (out.ids.size() == static_cast<std::size_t>(settings.maxNewTokens) && out.end != ChatReply::End::EndOfTurn)
        out.end = stop && stop->load() ? ChatReply::End::Stopped : ChatReply::End::MaxTokens;
    std::vector<std::int64_t> kept = out.ids;
    if (out.end == ChatReply::End::EndOfTurn) kept.pop_back();
    out.text = m->decode(prompt, kept);
    // The rest of the text (a character held back, a reply shown only when done).
    if (onText && out.text.size() > shown.size() && out.text.compare(0, shown.size(), shown) == 0)
        onText(out.text.substr(shown.size()));
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return out;
}

} // namespace tb
