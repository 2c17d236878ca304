// trainbench-cli export-model: a run's weights as model.safetensors (+ config.json for Llama).
#include <filesystem>
#include <iostream>

#include "Command.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "train/ModelTools.h"

namespace tb::cli {
namespace {

int exportModelCommand(const Args& args)
{
    const auto id = args.runId();
    const auto output = args.value("--output");
    if (!output || output->empty()) throw InputError("'export-model' needs --output DIR (a folder; it is created)");
    auto store = openExistingStore(args.value("--db").value_or(""));
    for (const auto& file : exportModelFiles()) refuseStoreOutput(*store, (std::filesystem::path(*output) / file).string());
    const auto run = trainedRun(*store, id, args.value("--checkpoint").value_or(""));
    const bool merge = args.flag("--merge-lora"), quantized = args.flag("--quantized");
    if (merge && run.config.lora.rank == 0) {
        std::cerr << "note: run " << id << " has no LoRA adapters; --merge-lora changes nothing\n";
    }
    const auto result = exportModel(run.config, run.checkpoint, *output, merge, quantized);
    std::cout << "wrote " << result.weightsPath << " (" << result.tensors << " tensors, " << result.parameters
              << " parameters" << (result.mergedLora ? ", LoRA merged" : "")
              << (result.quantized ? ", block linears in bitsandbytes " + run.config.model.quantize : std::string()) << ")\n";
    if (result.format == "peft") {
        std::cout << "wrote " << result.configPath << " (a PEFT LoRA adapter on " << run.config.model.path
                  << "; --merge-lora writes the merged model instead)\n";
    } else if (result.format == "hf") {
        std::cout << "wrote " << result.configPath << " (the source folder's architecture, with its generation and "
                     "tokenizer files)\n";
    } else if (!result.configPath.empty()) {
        std::cout << "wrote " << result.configPath << " (LlamaForCausalLM)\n";
    }
    if (run.config.lora.rank > 0 && !result.mergedLora && result.format != "peft") {
        std::cout << "note: the adapters are stored as separate *.lora_A / *.lora_B tensors; use --merge-lora for a "
                     "plain model other tools load\n";
    }
    return kExitOk;
}

const CommandRegistration exportModelRegistration{Command{
    "export-model",
    "Write a run's model weights as model.safetensors (and a Hugging Face config.json for llama models; an hf run: "
    "a model folder of its family, or a PEFT adapter folder with LoRA).",
    "RUN_ID --output DIR [--merge-lora] [--quantized] [--checkpoint FILE]",
    {{"--db", true, "experiment database", "FILE"},
     {"--output", true, "the folder to write into (created if missing)", "DIR"},
     {"--merge-lora", false, "fold LoRA adapters into the base weights (W + alpha/r * B A)"},
     {"--quantized", false, "a QLoRA run: the merged model quantized again as a bitsandbytes folder (transformers' layout)"},
     {"--checkpoint", true, "a checkpoint file of this run instead of its latest", "FILE"}},
    &exportModelCommand}};

} // namespace
} // namespace tb::cli
