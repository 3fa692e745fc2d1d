"""Checks for every stage: the OS and architecture the plan asked for, and the user images run as."""

USER = "torchstack"


def test_architecture_matches_the_plan(host, ours, image_attrs, catalog):
    machine = host.run("uname -m").stdout.strip()
    assert machine == ours["arch"], f"expected {ours['arch']} inside the image, found {machine}"
    docker_arch = catalog.architectures[ours["arch"]].docker.split("/")[1]
    assert image_attrs["Architecture"] == docker_arch, f"image metadata says {image_attrs['Architecture']}, expected {docker_arch}"


def test_os_is_the_planned_debian_release(host, ours):
    release = host.file("/etc/os-release").content_string
    assert f"VERSION_CODENAME={ours['distribution']}" in release, (
        f"expected Debian {ours['distribution']}, /etc/os-release says:\n{release}"
    )


def test_build_user_and_paths_exist(host, ours):
    user = host.user(USER)
    assert user.exists, f"user {USER} is missing"
    assert user.uid == 1000, f"user {USER} has uid {user.uid}, expected 1000"
    assert host.file(user.home).is_directory, f"home {user.home} is missing"
    assert host.file("/usr/bin/python3").exists, "python3 is missing"


def test_default_user_is_not_root(image_attrs, user_host):
    configured = image_attrs["Config"].get("User") or "root (unset)"
    whoami = user_host.run("id -u").stdout.strip()
    assert whoami not in ("", "0"), f"the image runs as root (Config.User = {configured})"


def test_default_user_has_no_sudo_and_no_password(host, user_host):
    name = user_host.run("id -un").stdout.strip()
    assert not host.exists("sudo"), "sudo is installed"
    groups = host.user(name).groups
    assert not {"sudo", "wheel", "admin"} & set(groups), f"{name} is in {groups}"
    shadow = host.run(f"getent shadow {name}").stdout.split(":")
    password = shadow[1] if len(shadow) > 1 else ""
    assert password.startswith(("!", "*")), f"{name} has a usable password hash in /etc/shadow"
