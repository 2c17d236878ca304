// trainbench-cli devices: what the GPUs here can do, or the ones in the catalogue.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "Command.h"
#include "gpu/Catalogue.h"
#include "gpu/Discovery.h"
#include "train/Trainer.h"

namespace tb::cli {
namespace {

double gib(std::int64_t bytes) { return bytes / 1073741824.0; }

nlohmann::json capabilityJson(ComputeCapability cc)
{
    nlohmann::json j;
    for (const auto& a : capabilitiesOf(cc)) {
        j[a.feature] = a.supported;
        j[a.feature + "_reason"] = a.reason;
    }
    return j;
}

std::string badges(ComputeCapability cc)
{
    std::string out;
    for (const auto& a : capabilitiesOf(cc)) out += (out.empty() ? "" : "  ") + a.feature + (a.supported ? "+" : "-");
    return out;
}

nlohmann::json catalogueJson(const CatalogueGpu& g, int count)
{
    nlohmann::json j = {{"id", g.id},
                        {"name", g.name},
                        {"aliases", g.aliases},
                        {"compute_capability", g.cc.text()},
                        {"memory_bytes", g.memoryBytes},
                        {"spec_memory_gb", g.specMemoryGb},
                        {"bandwidth_gbs", g.bandwidthGbs},
                        {"fp32_tflops", g.fp32Tflops},
                        {"fp16_tflops", g.fp16Tflops},
                        {"bf16_tflops", g.bf16Tflops},
                        {"count", count},
                        {"source", g.source}};
    j.update(capabilityJson(g.cc));
    return j;
}

int devices(const Args& args)
{
    const bool json = args.flag("--json");
    if (auto name = args.value("--gpu")) {
        const GpuTarget t = GpuCatalogue::bundled().resolve(*name);
        const PrecisionDecision p = decidePrecision("auto", t.gpu.cc);
        if (json) {
            auto j = catalogueJson(t.gpu, t.count);
            j["auto_precision"] = p.precision;
            j["auto_precision_reason"] = p.reason;
            if (!t.note.empty()) j["note"] = t.note;
            std::cout << nlohmann::json::array({j}).dump(2) << "\n";
            return kExitOk;
        }
        if (!t.note.empty()) std::cout << "note: " << t.note << "\n";
        std::printf("%s: compute capability %s, %.2f GiB per GPU as PyTorch reports it (%g GB on the data sheet), "
                    "%g GB/s, fp32 %g / fp16 %g / bf16 %g TFLOP/s\n",
                    t.label().c_str(), t.gpu.cc.text().c_str(), t.gpu.memoryGib, t.gpu.specMemoryGb, t.gpu.bandwidthGbs,
                    t.gpu.fp32Tflops, t.gpu.fp16Tflops, t.gpu.bf16Tflops);
        if (t.count > 1) std::printf("data parallel: each of the %d GPUs holds its own %.2f GiB\n", t.count, t.gpu.memoryGib);
        for (const auto& a : capabilitiesOf(t.gpu.cc)) std::cout << "  " << a.reason << "\n";
        std::cout << "precision auto: " << p.precision << " (" << p.reason << ")\n";
        return kExitOk;
    }
    if (args.flag("--catalog")) {
        const auto& entries = GpuCatalogue::bundled().entries();
        if (json) {
            auto list = nlohmann::json::array();
            for (const auto& g : entries) list.push_back(catalogueJson(g, 1));
            std::cout << list.dump(2) << "\n";
            return kExitOk;
        }
        std::printf("%-32s %-4s %9s %8s %8s %8s  %s\n", "NAME", "CC", "MEM GiB", "GB/s", "FP32", "BF16", "CAPABILITIES");
        for (const auto& g : entries) {
            std::printf("%-32s %-4s %9.2f %8.0f %8.1f %8.1f  %s\n", g.name.substr(0, 32).c_str(), g.cc.text().c_str(),
                        g.memoryGib, g.bandwidthGbs, g.fp32Tflops, g.bf16Tflops, badges(g.cc).c_str());
        }
        std::cout << entries.size() << " GPUs; 'devices --gpu NAME' details one (names, aliases and 2xNAME work).\n";
        return kExitOk;
    }
    const auto driver = makeNvidiaDriver();
    const GpuReport report = discoverGpus(*driver, torchCudaInfo());
    if (json) {
        auto list = nlohmann::json::array();
        for (const auto& d : report.devices) {
            nlohmann::json j = {{"index", d.index},
                                {"name", d.name},
                                {"compute_capability", d.cc.text()},
                                {"memory_bytes", d.totalBytes},
                                {"sm_count", d.smCount}};
            if (d.usage) {
                j["free_bytes"] = d.usage->freeBytes;
                j["used_bytes"] = d.usage->usedBytes;
            }
            j.update(capabilityJson(d.cc));
            list.push_back(j);
        }
        std::cout << list.dump(2) << "\n";
        if (report.state != GpuState::Usable) std::cerr << report.summary << " " << report.fix << "\n";
        return kExitOk;
    }
    std::cout << report.summary << "\n";
    if (!report.fix.empty()) std::cout << "what to do: " << report.fix << "\n";
    std::cout << "LibTorch " << torchVersion() << ": built with CUDA " << (report.torch.builtWithCuda ? "yes" : "no")
              << ", CUDA available " << (report.torch.available ? "yes" : "no") << ", devices " << report.torch.deviceCount
              << "\n";
    for (const auto& d : report.devices) {
        std::printf("cuda:%d  %s  compute capability %s, %d SMs, %.2f GiB", d.index, d.name.c_str(), d.cc.text().c_str(),
                    d.smCount, gib(d.totalBytes));
        if (d.usage) {
            std::printf(", %.2f GiB free", gib(d.usage->freeBytes));
            if (d.usage->temperatureC) std::printf(", %d C", *d.usage->temperatureC);
            if (d.usage->utilizationPercent) std::printf(", %d%% busy", *d.usage->utilizationPercent);
            if (d.usage->powerWatts) std::printf(", %.0f W", *d.usage->powerWatts);
        }
        std::printf("\n");
        for (const auto& a : capabilitiesOf(d.cc)) std::cout << "    " << a.reason << "\n";
    }
    return kExitOk;
}

const CommandRegistration devicesRegistration{Command{
    "devices",
    "Show the GPUs here and what they can do, or the catalogue of GPUs to plan for.",
    "[--catalog] [--gpu NAME] [--json]",
    {{"--catalog", false, "list the catalogue of known GPUs instead of this machine's"},
     {"--gpu", true, "one catalogue GPU: a name or alias, optionally with a count (T4, \"Tesla T4\", 2xT4, a100-40gb)",
      "NAME"},
     {"--json", false, "print a JSON list of objects (name, compute_capability, memory_bytes, bf16, bf16_reason, ...)"}},
    &devices}};

} // namespace
} // namespace tb::cli
