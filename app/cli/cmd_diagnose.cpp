// trainbench-cli preflight / explain / audit: the diagnostics on the command line.
#include <cstdio>
#include <iostream>

#include "Command.h"
#include "common/Errors.h"
#include "train/DerivedPlan.h"
#include "config/RunConfig.h"
#include "diagnose/ErrorExplainer.h"
#include "diagnose/Preflight.h"
#include "gpu/Catalogue.h"
#include "run/RunSession.h"
#include "train/DeviceAudit.h"

namespace tb::cli {
namespace {

void print(const std::vector<Finding>& findings, bool json)
{
    if (json) {
        std::cout << findingsToJson(findings) << "\n";
        return;
    }
    for (const auto& f : findings) std::cout << findingText(f);
}

int preflight(const Args& args)
{
    const auto path = args.value("--config");
    if (!path) throw InputError("'preflight' needs --config FILE");
    PreflightTarget target;
    if (auto gpu = args.value("--gpu")) target.gpu = GpuCatalogue::bundled().resolve(*gpu);
    else target.local = localMachine();
    // A config planned from its own step (a quantized base, a folder's own
    // head size), and a LoRA config's NF4 alternative: derived here, in seconds.
    target.derivePlan = [](const RunConfig& c) { return std::make_shared<const DerivedStep>(deriveStep(c)); };
    std::vector<Finding> findings;
    try {
        const auto config = loadConfigFile(*path);
        target.model = inspectModelFile(config); // a TorchScript model's vocabulary
        findings = runPreflight(config, target);
    } catch (const ConfigError& e) {
        // An invalid config is the first finding, not a crash of the check.
        findings = configIssueFindings(e.issues());
    }
    const bool json = args.flag("--json");
    if (!json) {
        std::cout << *path << " on " << (target.gpu ? target.gpu->label() : std::string("this machine")) << ": ";
        int errors = 0, warnings = 0;
        for (const auto& f : findings) {
            errors += f.severity == Severity::Error;
            warnings += f.severity == Severity::Warning;
        }
        std::cout << errors << " error(s), " << warnings << " warning(s)\n";
    }
    print(findings, json);
    return hasErrors(findings) ? kExitFindings : kExitOk;
}

std::string readInput(const std::string& name)
{
    std::string text;
    if (name == "-") {
        // Keep the tail: a training log piped in may be long.
        char buffer[65536];
        std::size_t n;
        while ((n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) {
            text.append(buffer, n);
            if (text.size() > 2 * kExplainMaxBytes) text.erase(0, text.size() - kExplainMaxBytes);
        }
        return text;
    }
    return readTextTail(name);
}

int explain(const Args& args)
{
    if (args.positionals().size() != 1) {
        throw InputError("'explain' needs one FILE (a log, a traceback) or - for standard input");
    }
    const std::string text = readInput(args.positionals()[0]);
    std::vector<Finding> findings;
    if (auto configPath = args.value("--config")) {
        // With the config, an out-of-memory finding gains the batch that fits.
        const RunConfig config = loadConfigFile(*configPath);
        findings = explainFailure(text, &config, "cuda");
    } else {
        findings = ErrorExplainer::bundled().explain(text);
    }
    print(findings, args.flag("--json"));
    return kExitOk;
}

int audit(const Args& args)
{
    const auto path = args.value("--config");
    if (!path) throw InputError("'audit' needs --config FILE");
    const auto config = loadConfigFile(*path);
    const auto report = auditDevices(config, args.value("--device").value_or(""));
    if (args.flag("--json")) {
        std::cout << report.toJson() << "\n";
        return report.flagged() > 0 ? kExitFindings : kExitOk;
    }
    std::cout << *path << ": " << report.model << ", " << report.tensors.size() << " tensors audited for "
              << report.target
              << (report.moved ? " (the model was moved there)"
                               : " (judged: " + report.target + " is not on this machine; parameters and buffers "
                                 "follow the move, nothing else does)")
              << "\n";
    const bool all = args.flag("--all");
    for (const auto& e : report.tensors) {
        if (!all && e.ok) continue;
        // "blocks.3.pe.position_scaling: cpu, expected cuda:0 (attribute, float32)", then the cause.
        std::cout << "  " << e.path << ": " << e.device << (e.ok ? "" : ", expected " + e.expectedDevice) << " ("
                  << e.kind << ", " << e.dtype << ")\n";
        if (!e.ok) std::cout << "      " << e.cause << "\n";
    }
    if (report.flagged() == 0) std::cout << "Every tensor is on " << report.target << ".\n";
    else std::cout << report.flagged() << " tensor(s) are not on " << report.target << ".\n";
    return report.flagged() > 0 ? kExitFindings : kExitOk;
}

const CommandRegistration auditCommand{Command{
    "audit",
    "Check that every tensor a training step touches will be on the run's device.",
    "--config FILE [--device D] [--json] [--all]",
    {{"--config", true, "the experiment config (JSON); a torchscript model is loaded from model.path", "FILE"},
     {"--device", true, "the device to audit for (cpu, cuda, cuda:N, auto); default: the config's. A GPU this "
                        "machine lacks is judged, not moved to", "D"},
     {"--json", false, "print {\"tensors\": [...], \"flagged\": N}"},
     {"--all", false, "list every tensor, not only the misplaced ones"}},
    &audit}};

const CommandRegistration preflightCommand{Command{
    "preflight",
    "Check a config before launch: precision, attention, memory, data, device.",
    "--config FILE [--gpu NAME] [--json]",
    {{"--config", true, "the experiment config (JSON)", "FILE"},
     {"--gpu", true, "plan for this GPU from the catalogue (e.g. T4, 2xA100); default: this machine", "NAME"},
     {"--json", false, "print {\"findings\": [...]}"}},
    &preflight}};

const CommandRegistration explainCommand{Command{
    "explain",
    "Explain a failure: a traceback, an error message or a whole training log.",
    "FILE|- [--config FILE] [--json]",
    {{"--config", true, "the run's config, so an out-of-memory finding names the batch that fits", "FILE"},
     {"--json", false, "print {\"findings\": [...]}"}},
    &explain,
    1}};

} // namespace
} // namespace tb::cli
