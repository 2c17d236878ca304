#pragma once
// TorchScript causal LMs built in C++ (no Python) for the device audit, the
// run-time locator and model.type "torchscript". Each variant reproduces one
// way tensors end up on the wrong device:
//   Clean:       every tensor a parameter or buffer.
//   PlainTensor: a block's positional module keeps its learned scales as plain
//                tensor attributes (blocks.N.pe.position_scaling and
//                blocks.N.pe.freq_enhancement); moving the model leaves them behind.
//   MetaTensor:  blocks.1.pe.position_scaling was created on the meta device;
//                the forward multiplies activations by it (an elementwise op,
//                which raises the real "found at least two devices, meta and cpu").
//   MemoryState: a memory bank carries a state across steps in a dict attribute
//                (memory.bank["state"]), created without a device.
// forward: int64 token ids [B, T] -> logits [B, T, vocab].

#include <string>

#include <torch/script.h>
#include <torch/torch.h>

namespace tb::fixtures {

enum class ScriptVariant { Clean, PlainTensor, MetaTensor, MemoryState };

inline torch::jit::Module scriptedLm(ScriptVariant variant, int vocab = 256, int dim = 16, int blocks = 2)
{
    using torch::jit::Module;
    const auto learned = [](torch::Tensor t) { return t.requires_grad_(true); };
    torch::manual_seed(7);
    Module embed("Embedding");
    embed.register_parameter("weight", learned(torch::randn({vocab, dim}) * 0.1), false);
    Module list("Blocks");
    std::string calls;
    for (int i = 0; i < blocks; ++i) {
        Module pe("PositionalScale");
        const bool meta = variant == ScriptVariant::MetaTensor && i == 1;
        auto scaling = meta ? torch::ones({dim}, torch::Device("meta")) : torch::ones({dim});
        auto enhancement = torch::zeros({dim});
        if (variant == ScriptVariant::PlainTensor || meta) {
            pe.register_attribute("position_scaling", c10::TensorType::get(), scaling, false);
            pe.register_attribute("freq_enhancement", c10::TensorType::get(), enhancement, false);
        } else {
            pe.register_parameter("position_scaling", learned(scaling), false);
            pe.register_parameter("freq_enhancement", learned(enhancement), false);
        }
        pe.define("def forward(self, x):\n    return x * self.position_scaling + self.freq_enhancement\n");
        Module proj("Linear");
        proj.register_parameter("weight", learned(torch::randn({dim, dim}) / std::sqrt(static_cast<double>(dim))), false);
        proj.register_parameter("bias", learned(torch::zeros({dim})), false);
        proj.define("def forward(self, x):\n    return torch.matmul(x, self.weight.t()) + self.bias\n");
        Module block("Block");
        block.register_module("pe", pe);
        block.register_module("proj", proj);
        block.define("def forward(self, x):\n    h = self.pe.forward(x)\n    return x + torch.tanh(self.proj.forward(h))\n");
        list.register_module(std::to_string(i), block);
        calls += "    x = getattr(self, \"" + std::to_string(i) + "\").forward(x)\n";
    }
    list.define("def forward(self, x):\n" + calls + "    return x\n");
    Module head("Linear");
    head.register_parameter("weight", learned(torch::randn({vocab, dim}) * 0.1), false);
    head.define("def forward(self, x):\n    return torch.matmul(x, self.weight.t())\n");

    Module root("TinyLm");
    root.register_module("embed", embed);
    root.register_module("blocks", list);
    std::string body = "def forward(self, tokens):\n    x = torch.embedding(self.embed.weight, tokens)\n"
                       "    x = self.blocks.forward(x)\n";
    if (variant == ScriptVariant::MemoryState) {
        Module memory("MemoryBank");
        c10::Dict<std::string, at::Tensor> bank;
        bank.insert("state", torch::zeros({dim})); // created without a device
        memory.register_attribute("bank", c10::DictType::create(c10::StringType::get(), c10::TensorType::get()), bank,
                                  false);
        memory.define("def forward(self, x):\n    state = self.bank[\"state\"]\n"
                      "    self.bank[\"state\"] = 0.9 * state + 0.1 * x.detach().mean(dim=[0, 1])\n"
                      "    return x + state\n");
        root.register_module("memory", memory);
        body += "    x = self.memory.forward(x)\n";
    }
    root.register_module("head", head);
    root.define(body + "    return self.head.forward(x)\n");
    return root;
}

} // namespace tb::fixtures
