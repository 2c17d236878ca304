#pragma once
// The trainbench-cli the window starts for work kept out of its own process
// (data-parallel ranks, Slurm scripts, the derived memory plan's traced
// steps): $TRAINBENCH_CLI when set, else the one beside the window's
// executable, else the one on PATH.

#include <QCoreApplication>
#include <QFileInfo>
#include <QString>

namespace tb::ui {

inline QString cliProgram()
{
    const QString given = qEnvironmentVariable("TRAINBENCH_CLI");
    if (!given.isEmpty()) return given;
    const QString beside = QCoreApplication::applicationDirPath() + "/trainbench-cli";
    return QFileInfo(beside).isExecutable() ? beside : QStringLiteral("trainbench-cli");
}

} // namespace tb::ui
