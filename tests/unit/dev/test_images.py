"""Which images the stack pushes, and under which names (pure)."""

from __future__ import annotations

from slinky.dev import images


def test_each_slurm_image_goes_under_the_stacks_name_and_upstreams_mirrored_name() -> None:
    pushes = images.slurm_pushes()
    targets = {p.target for p in pushes}
    for name in ("slurmctld", "slurmd", "slurmrestd", "slurmdbd", "sackd", "login"):
        assert f"slinky/{name}:26.05" in targets
        assert f"slinkyproject/{name}:26.05-ubuntu26.04" in targets
    assert {p.source for p in pushes} == {f"localhost/slinky/{n}:26.05" for n in images.SLURM_IMAGES}


def test_the_sources_id_changes_with_the_rootfs() -> None:
    assert images.slurm_sources_id("a") != images.slurm_sources_id("b")
    assert images.slurm_sources_id("a") == images.slurm_sources_id("a")


def test_the_project_image_is_tagged_with_the_project_version() -> None:
    push = images.project_push(images.project_version())
    assert len(images.project_sources_id()) == 12
    assert push.source == f"localhost/slinky-temporal:{images.project_version()}"
    assert push.target.startswith("slinky/slinky-temporal:")


def test_the_examples_nginx_is_served_as_docker_hubs_library_nginx() -> None:
    targets = [p.target for p in images.nginx_pushes()]
    assert targets == ["slinky/nginx:1.22", "library/nginx:1.22", "library/nginx:latest"]
    assert {p.source for p in images.nginx_pushes()} == {"localhost/slinky/nginx:1.22"}
    assert images.nginx_sources_id() == images.nginx_sources_id()
