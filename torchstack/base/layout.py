"""Where things live inside every image: the venv, the toolkit's folders, the user, the caches."""

from __future__ import annotations

from dataclasses import dataclass

# Python: one virtual environment, first on PATH, in every image from the tools stage on.
VENV = "/opt/venv"
IMAGE_PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The toolkit's own folder and what it holds in the build stages and the images.
TOOLKIT_DIR = "/opt/torchstack"
SCRIPTS_DIR = f"{TOOLKIT_DIR}/scripts"  # the build scripts (scripts/ in the repository)
PATCHES_DIR = f"{TOOLKIT_DIR}/patches"  # one folder per component (patches/ in the repository)
SOURCES_DIR = f"{TOOLKIT_DIR}/sources"  # the pinned source archives, as verified
WHEELS_DIR = f"{TOOLKIT_DIR}/wheels"  # the torch wheel the dev stage builds or brings
SOURCE_TREES_DIR = f"{TOOLKIT_DIR}/src"  # the dev image's unpacked, patched sources (no build tree)
EXAMPLES_DIR = f"{TOOLKIT_DIR}/examples"  # the final image's examples (examples/ in the repository)
BUILD_INFO = f"{TOOLKIT_DIR}/build-info.json"
# What the release image's last layer upgraded from its Debian suites (PACKAGE=VERSION a line).
APT_UPGRADES = f"{TOOLKIT_DIR}/apt-upgrades.txt"
# The final image's pins for the images built on it: every distribution of the venv at its exact
# version (local label kept: torch==2.13.0+cpu), which the image's installer reads as constraints
# (PIP_CONSTRAINT, UV_CONSTRAINT), so a child's install adds packages and moves none of these.
PINS = f"{TOOLKIT_DIR}/constraints.txt"
# The installer's own tools: not pinned, so that a child may upgrade them.
INSTALLER_TOOLS = ("pip", "setuptools", "wheel")
# The system CA store (Debian's ca-certificates), which the image's pip trusts instead of the CA
# bundle it vendors (pip/_vendor/certifi/cacert.pem becomes a link to it, as Debian's own pip does).
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
ENTRYPOINT = f"{TOOLKIT_DIR}/entrypoint.sh"
ENTRYPOINT_CONF = f"{TOOLKIT_DIR}/entrypoint.conf"
# The final image's start-up hook (scripts/torchstack_startup.py): every Python process of the venv
# loads it through the .pth file, whatever its entry point (threads, torch.compile's scratch).
STARTUP_FILES = ("torchstack_startup.py", "torchstack-startup.pth")
# The final image's module for models compiled ahead of time (scripts/torchstack_warm.py), in the venv's
# site-packages beside the hook, and where it stores them (its STORE): one folder per model, one per key.
WARM_MODULE = "torchstack_warm.py"
SITE_FILES = (*STARTUP_FILES, WARM_MODULE)
WARM_DIR = f"{TOOLKIT_DIR}/warm"

# In a stage that installs Python packages: what its throwaway fetch stage downloaded from the
# package index (the only step that reaches it), for its own steps to install offline.
DOWNLOADS_DIR = f"{TOOLKIT_DIR}/downloads"

# Throwaway places of the build stages: unpacked sources and out-of-tree builds.
BUILD_TREES_DIR = "/tmp/torchstack-src"

# BuildKit's cache mount for ccache (--builder buildx): where compiling steps mount it, and its id
# in BuildKit's store, one per architecture (--ccache-dir moves it to and from a host folder).
CCACHE_DIR = "/ccache"
CCACHE_ID = "torchstack-ccache-{arch}"

# Where BuildKit's copying steps bind what they copy (templates/_common.j2: copy); nothing stays there.
COPY_MOUNT = "/run/torchstack-copy"

# In the libs image: the compiled libraries the final image ships, at their own paths under this
# folder (symbolic links kept), so that the final stage copies them with one COPY, links intact.
PAYLOAD_DIR = f"{TOOLKIT_DIR}/payload"

# The dynamic loader's search path for the libraries the toolkit compiles (one file per image).
LD_SO_CONF = "/etc/ld.so.conf.d/torchstack.conf"
DPKG_UNREAD = "/etc/dpkg/dpkg.cfg.d/torchstack-unread"  # dpkg's path-exclude lines for what nothing at run time reads
# apt's and dpkg's lists, logs and backups: each step that runs apt removes them (they hold the clock's
# times), and the OS tarball holds none, so that no step removes one an earlier layer holds (a whiteout
# is written with the clock's time).
APT_LEFTOVERS = (
    "/var/lib/apt/lists/*",
    "/var/log/apt/*",
    "/var/log/dpkg.log",
    "/var/log/alternatives.log",
    "/var/cache/ldconfig/aux-cache",
    "/var/cache/debconf/*-old",
    "/var/lib/dpkg/*-old",
)


@dataclass(frozen=True)
class User:
    name: str = "torchstack"
    uid: int = 1000

    @property
    def home(self) -> str:
        return f"/home/{self.name}"


USER = User()

# Where a build step leaves its working files (temporary folders: Inductor's cache of a bake, with
# precompiled headers of hundreds of MB; root's and the user's caches: pip's, compilers'), and
# where apt leaves the packages it downloaded: empty in every final image, and in an image built on it.
WORKING_FOLDERS = ("/tmp", "/var/tmp", "/root/.cache", f"{USER.home}/.cache")
WORKING_FILES_COMMAND = (
    f"find {' '.join(WORKING_FOLDERS)} -mindepth 1 -maxdepth 1 2>/dev/null; find /var/cache/apt/archives -name '*.deb' 2>/dev/null"
)
