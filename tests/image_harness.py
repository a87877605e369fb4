"""Build the Dockerfile with buildah and run the image with podman, on a machine without a Docker daemon or
Docker Hub: the mechanics behind tests/test_image.py.

- The base: Docker Hub's python image is out of reach, so a stand-in Debian bookworm root with python3 and venv
  is made by mmdebstrap and cached under ~/.cache/sglang-exporter/image-base/, keyed by its recipe (a changed
  recipe makes a new one). It enters the build as `--build-arg PYTHON_IMAGE=...`; the Dockerfile is unchanged.
- Storage: a private graph root, run root and lock files in a temporary directory (CONTAINERS_STORAGE_CONF,
  CONTAINERS_CONF), so nothing touches the machine's own containers and everything goes at the end.
- Runtime: Debian's runc with the cgroupfs manager (no systemd here), default ulimits inside this process's
  hard limits (the runtime fails to start a container asking for more than the caller may have).
- TLS: pip in the build's RUN steps trusts the machine's CA bundle through a read-only mount of /etc/ssl/certs
  and a pip.conf naming it (machines that intercept TLS need it; elsewhere it changes nothing).
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path

BASE_SUITE = "bookworm"
BASE_PACKAGES = ["python3", "python3-venv", "python-is-python3", "ca-certificates"]
# documentation and translations: a fifth of the root, never read by the exporter
BASE_EXCLUDES = ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"]
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TOOLS = ("buildah", "podman", "runc", "mmdebstrap", "catatonit")  # catatonit: the pause process of pods


def base_recipe() -> list[str]:
    """The mmdebstrap arguments that make the stand-in base, up to the output path."""
    return (["--variant=essential", "--include=" + ",".join(BASE_PACKAGES)]
            + [f"--dpkgopt=path-exclude={p}" for p in BASE_EXCLUDES] + ["--format=tar", BASE_SUITE])


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sglang-exporter" / "image-base"


def base_tarball(log) -> Path:
    """The cached root tarball for the current recipe, made (minutes, from the Debian mirror) when missing."""
    key = hashlib.sha256(json.dumps(base_recipe()).encode()).hexdigest()[:16]
    tar = cache_dir() / f"{BASE_SUITE}-python3-{key}.tar"
    if tar.exists():
        return tar
    tar.parent.mkdir(parents=True, exist_ok=True)
    partial = tar.with_suffix(f".partial-{os.getpid()}")
    started = time.monotonic()
    try:
        run(["mmdebstrap", "--quiet", *base_recipe(), str(partial)], timeout=1200)
        partial.rename(tar)  # whole or absent: a run killed half-way leaves only a .partial file
    finally:
        partial.unlink(missing_ok=True)
    log(f"mmdebstrap made the stand-in base in {time.monotonic() - started:.0f}s: {tar}")
    return tar


def run(argv: list[str], env: dict | None = None, timeout: float = 120, check: bool = True,
        input: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def _ulimit(kind: int, cap: int) -> int:
    hard = resource.getrlimit(kind)[1]
    return cap if hard == resource.RLIM_INFINITY else min(hard, cap)


class Engine:
    """buildah and podman on a private storage under `root`."""

    def __init__(self, root: Path):
        self.root = root
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        (root / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n')
        nofile, nproc = _ulimit(resource.RLIMIT_NOFILE, 16384), _ulimit(resource.RLIMIT_NPROC, 8192)
        (root / "containers.conf").write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            "[engine]\n"
            'cgroup_manager = "cgroupfs"\nruntime = "runc"\nevents_logger = "file"\n'
            f'lock_type = "file"\ntmp_dir = "{root}/tmp"\n')
        self.env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
                    "CONTAINERS_CONF": str(root / "containers.conf")}

    def podman(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        return run(["podman", *args], env=self.env, timeout=timeout, check=check)

    def import_base(self, tar: Path, name: str) -> str:
        self.podman("import", "--quiet", str(tar), name, timeout=300)
        return name

    def build(self, context: Path, tag: str, build_args: dict[str, str]) -> subprocess.CompletedProcess:
        """`buildah build` of the Dockerfile as it is, in the docker format (which keeps the HEALTHCHECK)."""
        argv = ["buildah", "build", "--isolation", "chroot", "--format", "docker", "--tag", tag]
        for k, v in build_args.items():
            argv += ["--build-arg", f"{k}={v}"]
        if CA_BUNDLE.exists():
            pip_conf = self.root / "pip.conf"
            pip_conf.write_text(f"[global]\ncert = {CA_BUNDLE}\n")
            argv += ["--volume", f"{CA_BUNDLE.parent}:{CA_BUNDLE.parent}:ro",
                     "--volume", f"{pip_conf}:/etc/pip.conf:ro"]
        return run([*argv, str(context)], env=self.env, timeout=900)

    def cleanup(self) -> None:
        self.podman("pod", "rm", "--all", "--force", "--time", "0", check=False)
        self.podman("rm", "--all", "--force", "--time", "0", check=False)
        run(["buildah", "rm", "--all"], env=self.env, check=False)
        self.podman("system", "reset", "--force", check=False, timeout=300)
        shutil.rmtree(self.root, ignore_errors=True)
