"""cuda13_upgrade.sglang_build: SGLang from source or its wheel."""

from __future__ import annotations

import pytest

from cuda13_upgrade import sglang_build

# pip show --isolated sglang of the two installs (pip 25, the sandbox's stand-in); pip ends
# its empty fields with a space.
SHOW_WHEEL = "\n".join(
    [
        "Name: sglang",
        "Version: 0.5.9",
        "Summary: SGLang is a fast serving framework for large language models and vision language models.",
        "Home-page: ",
        "Author: ",
        "Author-email: ",
        "License: ",
        "Location: /opt/ml-env-cu130/lib/python3.11/site-packages",
        "Requires: flashinfer_cubin, flashinfer_python, sgl-kernel, torch",
        "Required-by: ",
        "",
    ]
)
SHOW_EDITABLE = "\n".join(
    [
        "Name: sglang",
        "Version: 0.5.9",
        "Summary: SGLang is a fast serving framework for large language models and vision language models.",
        "Location: /opt/ml-env-cu130/lib/python3.11/site-packages",
        "Editable project location: /opt/sglang-cu130/python",
        "Requires: flashinfer-cubin, flashinfer-python, sgl-kernel, torch",
        "Required-by: ",
        "Files:",
        "  __editable__.sglang-0.5.9.pth",
        "  __editable___sglang_0_5_9_finder.py",
        "  sglang-0.5.9.dist-info/METADATA",
        "",
    ]
)
VENV, SRC = "/opt/ml-env-cu130", "/opt/sglang-cu130"
SITE = f"{VENV}/lib/python3.11/site-packages"


@pytest.mark.parametrize(
    ("ref", "version"),
    [
        ("v0.5.9", "0.5.9"),
        ("0.5.9", "0.5.9"),
        ("V0.5.10rc1", "0.5.10rc1"),
        ("v0.5.9.post1", "0.5.9.post1"),
        (" v0.5.9 ", "0.5.9"),
        # commits and branches name no release
        ("3f1c2e9a5b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e", None),
        ("1234567", None),
        ("main", None),
        ("v0.5.9+cu130", None),
        ("", None),
    ],
)
def test_release_version_of_a_ref(ref, version):
    assert sglang_build.release_version(ref) == version


def test_the_requirement_of_each_method():
    repo = "https://github.com/sgl-project/sglang.git"
    assert sglang_build.requirement("source", repo, "v0.5.9") == (
        "sglang @ git+https://github.com/sgl-project/sglang.git@v0.5.9#subdirectory=python"
    )
    assert sglang_build.requirement("wheel", repo, "v0.5.9") == "sglang==0.5.9"
    assert sglang_build.requirement("wheel", repo, "0.5.10rc1") == "sglang==0.5.10rc1"
    with pytest.raises(ValueError, match="names no release"):
        sglang_build.requirement("wheel", repo, "3f1c2e9a")
    with pytest.raises(ValueError, match=r"must be one of \['source', 'wheel'\], got 'binary'"):
        sglang_build.requirement("binary", repo, "v0.5.9")


def test_pip_show_says_how_sglang_is_installed():
    assert sglang_build.parse_pip_show(SHOW_WHEEL) == {
        "name": "sglang",
        "version": "0.5.9",
        "location": SITE,
        "editable": None,
    }
    assert sglang_build.parse_pip_show(SHOW_EDITABLE)["editable"] == f"{SRC}/python"
    assert sglang_build.parse_pip_show("") == {}
    assert sglang_build.parse_pip_show("WARNING: Package(s) not found: sglang\n") == {}


@pytest.mark.parametrize(
    ("show", "needed", "remove_first", "reason"),
    [
        ("", True, False, "no sglang in the venv"),
        (SHOW_WHEEL, False, False, "the sglang 0.5.9 wheel is installed"),
        # An earlier source build: pip would keep it for sglang==0.5.9.
        (SHOW_EDITABLE, True, True, "sglang 0.5.9 is installed editable from /opt/sglang-cu130/python"),
        (SHOW_WHEEL.replace("0.5.9", "0.5.8"), True, True, "sglang 0.5.8 is installed, not 0.5.9"),
    ],
)
def test_the_wheel_is_installed_unless_it_is_there(show, needed, remove_first, reason):
    plan = sglang_build.wheel_plan(sglang_build.parse_pip_show(show), "v0.5.9")
    assert plan == {"needed": needed, "remove_first": remove_first, "reason": reason}


def test_the_resolved_wheel_is_taken_only_when_it_is_the_release_wheel():
    wheel = {
        "name": "sglang",
        "version": "0.5.9",
        "url": "http://127.0.0.1:8080/pypi/packages/sglang-0.5.9-py3-none-any.whl",
        "sha256": "a" * 64,
    }
    torch = {"name": "torch", "version": "2.9.1+cu130", "url": "http://x/torch.whl", "sha256": None}
    assert sglang_build.resolved_wheel([torch, wheel], "v0.5.9") == [wheel]
    # A resolution made for a source build (a git URL), another version, or none.
    from_git = {**wheel, "url": "git+http://127.0.0.1:8080/git/sglang.git@v0.5.9#subdirectory=python"}
    assert sglang_build.resolved_wheel([torch, from_git], "v0.5.9") == []
    assert sglang_build.resolved_wheel([wheel], "v0.5.8") == []
    assert sglang_build.resolved_wheel(None, "v0.5.9") == []


def _imported(file, version="0.5.9", dist="0.5.9"):
    return {"version": version, "file": file, "dist": dist}


def test_a_source_build_imports_from_its_tree_whatever_version_it_reports():
    ok = _imported(f"{SRC}/python/sglang/__init__.py", version="0.5.10.dev0", dist="0.5.10.dev0")
    assert sglang_build.import_problems(ok, "source", "v0.5.9", SRC, VENV) == []
    wrong = _imported(f"{SITE}/sglang/__init__.py")
    assert sglang_build.import_problems(wrong, "source", "v0.5.9", SRC, VENV) == [
        f"sglang in {VENV} imports from {SITE}/sglang/__init__.py, not from sglang_build_src={SRC}"
    ]
    # A tree beside the configured one, whose name starts alike, is not it.
    beside = _imported(f"{SRC}-old/python/sglang/__init__.py")
    assert sglang_build.import_problems(beside, "source", "v0.5.9", SRC, VENV) != []


def test_the_wheel_imports_from_the_venv_at_the_release_version():
    assert (
        sglang_build.import_problems(_imported(f"{SITE}/sglang/__init__.py"), "wheel", "v0.5.9", SRC, VENV)
        == []
    )
    from_tree = sglang_build.import_problems(
        _imported(f"{SRC}/python/sglang/__init__.py"), "wheel", "v0.5.9", SRC, VENV
    )
    assert from_tree == [
        f"sglang in {VENV} imports from {SRC}/python/sglang/__init__.py, not from the venv's own site-packages"
    ]
    other = sglang_build.import_problems(
        _imported(f"{SITE}/sglang/__init__.py", version="0.5.8", dist="0.5.8"), "wheel", "v0.5.9", SRC, VENV
    )
    assert other == [
        f"sglang.__version__ in {VENV} is '0.5.8', not '0.5.9' (sglang_build_version=v0.5.9)",
        f"its distribution in {VENV} is '0.5.8', not '0.5.9' (sglang_build_version=v0.5.9)",
    ]
    assert (
        len(
            sglang_build.import_problems(
                _imported(f"{SITE}/sglang/__init__.py", dist=None), "wheel", "v0.5.9", SRC, VENV
            )
        )
        == 1
    )


def test_the_record_names_what_a_rollback_removes_across_runs():
    repo = "http://127.0.0.1:8080/git/sglang.git"
    wheel = sglang_build.install_record(None, "wheel", "v0.5.9", repo, SRC, VENV)
    assert wheel == {
        "method": "wheel",
        "version": "v0.5.9",
        "requirement": "sglang==0.5.9",
        "venv": VENV,
        "src": None,
        "paths": [VENV],
    }
    source = sglang_build.install_record({}, "source", "v0.5.9", repo, SRC, VENV)
    assert source["src"] == SRC and source["paths"] == [VENV, SRC]
    assert source["requirement"] == f"sglang @ git+{repo}@v0.5.9#subdirectory=python"
    # The wheel after a source build: the earlier tree is still the new stack's to remove.
    assert sglang_build.install_record(source, "wheel", "v0.5.9", repo, SRC, VENV)["paths"] == [VENV, SRC]
    assert sglang_build.install_record(wheel, "source", "v0.5.9", repo, SRC, VENV)["paths"] == [VENV, SRC]


# -- the functions together, as the step calls them ------------------------------------------


def test_the_wheel_over_an_editable_tree_from_requirement_to_record():
    assert sglang_build.requirement("wheel", "https://x/sglang.git", "v0.5.9") == "sglang==0.5.9"
    show = sglang_build.parse_pip_show(SHOW_EDITABLE)
    assert sglang_build.wheel_plan(show, "v0.5.9")["remove_first"] is True
    assert sglang_build.resolved_wheel(None, "v0.5.9") == []
    imported = _imported(f"{SITE}/sglang/__init__.py")
    assert sglang_build.import_problems(imported, "wheel", "v0.5.9", SRC, VENV) == []
    assert sglang_build.install_record(None, "wheel", "v0.5.9", "https://x", SRC, VENV)["paths"] == [VENV]


def test_bad_values_are_refused_naming_them():
    with pytest.raises(ValueError, match="names no release"):
        sglang_build.requirement("wheel", "https://x/sglang.git", "main")
    with pytest.raises(ValueError, match="must be one of"):
        sglang_build.install_record(None, "pip", "v0.5.9", "https://x", SRC, VENV)
