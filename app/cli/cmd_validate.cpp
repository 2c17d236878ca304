// trainbench-cli validate: check a config without running it.
#include <iostream>

#include "Command.h"
#include "common/Errors.h"
#include "config/RunConfig.h"

namespace tb::cli {
namespace {

int validate(const Args& args)
{
    const auto path = args.value("--config");
    if (!path) throw InputError("'validate' needs --config FILE");
    const RunConfig c = loadConfigFile(*path);
    std::cout << *path << ": valid. \"" << c.name << "\": ";
    if (c.model.type == "torchscript") std::cout << "torchscript model " << c.model.path;
    else {
        std::cout << c.model.type << " " << c.model.nLayer << " layers, d_model " << c.model.dModel << ", "
                  << c.model.positionalEncoding << " positions";
        if (c.model.quantize != "none") {
            std::cout << ", " << c.model.quantize << " base" << (c.model.quantize == "nf4" && c.model.doubleQuant ? " (double quantized)" : "");
        }
        if (c.lora.rank > 0) std::cout << ", LoRA rank " << c.lora.rank;
    }
    std::cout << "; data " << c.data.source
              << ", " << effectiveSeqLen(c) << " tokens; batch " << c.train.batchSize << " x accum "
              << c.train.gradAccum << ", " << c.train.steps << " steps, " << c.optim.optimizer << " lr "
              << c.optim.lr << ", precision " << c.train.precision << ", device " << c.device << "\n";
    return kExitOk;
}

const CommandRegistration validateRegistration{Command{"validate",
                                               "Check a config file and report every problem with its JSON path.",
                                               "--config FILE",
                                               {{"--config", true, "the experiment config (JSON)", "FILE"}},
                                               &validate}};

} // namespace
} // namespace tb::cli
