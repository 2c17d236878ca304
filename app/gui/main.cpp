// trainbench: the desktop workbench.
#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QIcon>

#include "MainWindow.h"
#include "common/Version.h"
#include "train/Trainer.h"

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName("Trainbench");
    QApplication::setOrganizationName("Trainbench");
    QApplication::setApplicationVersion(QString("%1 (Qt %2, LibTorch %3)")
                                            .arg(tb::kAppVersion, qVersion(), QString::fromStdString(tb::torchVersion())));
    QApplication::setWindowIcon(QIcon(":/icons/trainbench.svg"));

    QCommandLineParser parser;
    parser.setApplicationDescription("Trainbench: configure, launch, watch and review training runs.");
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument("config", "An experiment config (JSON) to open.", "[FILE.json]");
    QCommandLineOption db("db", "Experiment database (default: $TRAINBENCH_DB, else the XDG data folder).", "FILE");
    parser.addOption(db);
    parser.process(app);

    tb::ui::MainWindow window(parser.value(db));
    const QStringList files = parser.positionalArguments();
    if (!files.isEmpty()) {
        if (!QFileInfo::exists(files.first())) {
            qCritical("trainbench: config file not found: %s", qPrintable(files.first()));
            return 2;
        }
        window.openConfig(files.first());
    } else {
        window.openExample(":/examples/default.json");
    }
    window.show();
    return app.exec();
}
