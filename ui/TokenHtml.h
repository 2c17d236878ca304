#pragma once
// Tokens as the data preview and the dataset browser show them: each token
// shaded in turn, special tokens (BOS, EOS) in grey, line breaks as ↵, and
// in a chat the tokens the loss is on in green; the id in each tooltip.

#include <QString>

#include <cstdint>
#include <string>
#include <vector>

#include "text/Tokenizer.h"

namespace tb::ui {

// pieces: each id's text (text::tokenPieces).
inline QString tokensHtml(const text::Tokenizer& tok, const std::vector<std::int32_t>& ids,
                          const std::vector<std::string>& pieces, const std::vector<std::uint8_t>& mask)
{
    QString html = "<div style=\"white-space: pre-wrap\">";
    for (std::size_t i = 0; i < ids.size() && i < pieces.size(); ++i) {
        QString piece = QString::fromStdString(pieces[i]).toHtmlEscaped();
        piece.replace("\n", "\u21b5<br>");
        const bool special = tok.isSpecial(ids[i]);
        const bool trained = i < mask.size() && mask[i];
        const char* style = trained ? (special ? "background:#86efac;color:#14532d;font-weight:bold"
                                               : (i % 2 ? "background:#bbf7d0" : "background:#86efac"))
                            : special ? "background:#e5e7eb;color:#374151;font-weight:bold"
                                      : (i % 2 ? "background:#fde68a" : "background:#bfdbfe");
        html += QString("<span style=\"%1\" title=\"%2\">%3</span>").arg(style).arg(ids[i]).arg(piece);
    }
    return html + "</div>";
}

} // namespace tb::ui
