"""A real OpenSSH server on loopback for tests and benches of remote runs:
Debian's sshd (openssh-server), started as the caller's own child with
generated host and user keys in a folder of the caller's, and stopped by its
pid. Nothing of the machine's own ssh setup is read or changed."""
import os
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)


class Sshd:
    """sshd on 127.0.0.1:port accepting folder/user_key; folder/stranger_key is refused."""

    def __init__(self, folder):
        self.folder = folder
        self.port = free_port()
        keygen(f"{folder}/host_key")
        keygen(f"{folder}/user_key")
        keygen(f"{folder}/stranger_key")
        with open(f"{folder}/user_key.pub") as f, open(f"{folder}/authorized_keys", "w") as out:
            out.write(f.read())
        with open(f"{folder}/sshd_config", "w") as f:
            f.write(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {folder}/host_key
AuthorizedKeysFile {folder}/authorized_keys
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PidFile none
PasswordAuthentication no
KbdInteractiveAuthentication no
""")
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation folder
        self.log = open(f"{folder}/sshd.log", "w")
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", f"{folder}/sshd_config"],
                                     stdout=self.log, stderr=self.log)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise SystemExit("sshd did not start: " + open(f"{folder}/sshd.log").read())

    def ssh_options(self, known_hosts):
        """--ssh-options for a host that logs in with user_key and keeps its known_hosts in the folder."""
        return (f"-i {self.folder}/user_key -o IdentitiesOnly=yes -o IdentityAgent=none "
                f"-o UserKnownHostsFile={known_hosts}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []
