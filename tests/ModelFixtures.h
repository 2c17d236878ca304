// Test helpers for freshly built models.
#pragma once

#include <torch/torch.h>

#include <string>

// The GPT starts each residual branch closed (attention proj and MLP out at
// zero), so at initialisation every block is the identity and nothing but the
// output projections gets a gradient. Tests of causality, checkpointing and
// gradient equivalence give those projections random values first, so that
// every weight of every block takes part.
inline void openResidualBranches(torch::nn::Module& model)
{
    torch::NoGradGuard noGrad;
    for (auto& p : model.named_parameters()) {
        const auto& name = p.key();
        if (name.find("lora_") != std::string::npos) continue;
        if (name.find("attn.proj.") != std::string::npos || name.find(".out.") != std::string::npos) {
            p.value().uniform_(-0.2, 0.2);
        }
    }
}
