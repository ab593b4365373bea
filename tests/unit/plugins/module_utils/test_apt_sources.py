"""The apt sources AMD's own method leaves on a node, and how the rocm role's files go beside them.

The AMD lines are those AMD's ROCm install guide for Ubuntu 22.04 (package manager method) has the
operator write: `/etc/apt/sources.list.d/amdgpu.list` and `rocm.list`, each entry with
`[arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg]` (also the files and keyring named in
ROCm/legacy-rocm-build#2362). The conflict these tests prevent is apt's "Conflicting values set for option
Signed-By regarding source URI SUITE: A != B" (for example free-pmx/free-pmx-no-subscription#15).
"""

from ansible_collections.instinct.finetune.plugins.module_utils import apt_sources as a

BASE = "https://repo.radeon.com"
FPR = "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"
OURS = "/etc/apt/keyrings/rocm.asc"
AMD_KEYRING = "/etc/apt/keyrings/rocm.gpg"
D = "/etc/apt/sources.list.d"
OWN = [f"{D}/rocm.sources", f"{D}/amdgpu.sources", f"{D}/rocm-graphics.sources"]
MANAGED_702 = [f"{BASE}/rocm/apt/7.0.2", f"{BASE}/amdgpu/30.10.2/ubuntu", f"{BASE}/graphics/7.0.2/ubuntu"]

AMDGPU_LIST = f"deb [arch=amd64 signed-by={AMD_KEYRING}] {BASE}/amdgpu/30.10.2/ubuntu jammy main\n"
ROCM_LIST = (
    f"deb [arch=amd64 signed-by={AMD_KEYRING}] {BASE}/rocm/apt/7.0.2 jammy main\n"
    f"deb [arch=amd64 signed-by={AMD_KEYRING}] {BASE}/graphics/7.0.2/ubuntu jammy main\n"
)
OUR_SOURCES = f"""\
# Ansible managed
Types: deb
URIs: {BASE}/rocm/apt/7.0.2
Suites: jammy
Components: main
Architectures: amd64
Signed-By: {OURS}
"""


def opts(uris, base_url, own_files, fingerprint, keyring):
    return {"uris": uris, "base_url": base_url, "own_files": own_files, "fingerprint": fingerprint, "keyring": keyring}


def amd_way(**extra):
    files = {f"{D}/amdgpu.list": AMDGPU_LIST, f"{D}/rocm.list": ROCM_LIST, "/etc/apt/sources.list": ""}
    files.update(extra)
    return a.parse_files(files)


def test_one_line_entries_with_their_options_are_read():
    entries = a.parse_one_line(ROCM_LIST + "# deb http://example.invalid/x jammy main\n", f"{D}/rocm.list")
    assert [(e["uri"], e["suite"], e["signed_by"]) for e in entries] == [
        (f"{BASE}/rocm/apt/7.0.2", "jammy", AMD_KEYRING),
        (f"{BASE}/graphics/7.0.2/ubuntu", "jammy", AMD_KEYRING),
    ]
    spaced = a.parse_one_line(f"deb [ arch=amd64 signed-by={AMD_KEYRING} ] {BASE}/amdgpu/30.20/ubuntu/ jammy main", "f")
    assert spaced[0]["uri"] == f"{BASE}/amdgpu/30.20/ubuntu"  # the trailing slash apt ignores
    assert spaced[0]["signed_by"] == AMD_KEYRING


def test_deb822_stanzas_are_read_and_a_disabled_one_is_left_out():
    off = "Enabled: no\nTypes: deb\nURIs: http://example.invalid/off\nSuites: jammy\nComponents: main\n"
    text = OUR_SOURCES + "\n" + off
    entries = a.parse_deb822(text, f"{D}/rocm.sources")
    assert [(e["uri"], e["signed_by"]) for e in entries] == [(f"{BASE}/rocm/apt/7.0.2", OURS)]
    embedded = a.parse_deb822(
        "Types: deb\nURIs: http://x.invalid\nSuites: a b\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n", "f"
    )
    assert [(e["suite"], e["signed_by"]) for e in embedded] == [("a", a.EMBEDDED_KEY), ("b", a.EMBEDDED_KEY)]


def test_amds_files_are_replaced_and_their_keyring_used_when_it_holds_the_expected_key():
    decided = a.plan(amd_way(), opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: [FPR]})
    assert decided == {
        "keyring": AMD_KEYRING,
        "adopted": True,
        "replace": [f"{D}/amdgpu.list", f"{D}/rocm.list"],
        "conflicts": [],
    }


def test_a_keyring_with_another_key_is_not_used_and_the_files_are_still_replaced():
    decided = a.plan(amd_way(), opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: ["0" * 40]})
    assert decided["keyring"] == OURS and decided["adopted"] is False
    assert decided["replace"] == [f"{D}/amdgpu.list", f"{D}/rocm.list"]
    assert decided["conflicts"] == []
    # AMD's key beside another one: the other could sign for AMD's pinned origin.
    decided = a.plan(amd_way(), opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: [FPR, "0" * 40]})
    assert decided["keyring"] == OURS and decided["adopted"] is False


def test_the_adopted_keyring_stays_adopted_on_the_next_run_once_amds_lists_are_replaced():
    first = a.plan(amd_way(), opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: [FPR]})
    # The second run reads what the first left: the role's own sources naming AMD's keyring, no lists.
    written = OUR_SOURCES.replace(OURS, first["keyring"])
    entries = a.parse_files({f"{D}/rocm.sources": written, "/etc/apt/sources.list": ""})
    assert a.keyring_candidates(entries, BASE, OWN, OURS) == [AMD_KEYRING]
    second = a.plan(entries, opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: [FPR]})
    assert second == {"keyring": AMD_KEYRING, "adopted": True, "replace": [], "conflicts": []}


def test_amds_files_for_another_release_are_replaced_too():
    other = f"deb [arch=amd64 signed-by={AMD_KEYRING}] {BASE}/rocm/apt/7.1 jammy main\n"
    decided = a.plan(
        amd_way(**{f"{D}/rocm.list": other}), opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: [FPR]}
    )
    assert f"{D}/rocm.list" in decided["replace"]


def test_a_mixed_file_is_not_replaced_and_its_conflicting_entry_is_named_with_the_fix():
    mixed = "deb http://archive.ubuntu.com/ubuntu jammy main\n" + AMDGPU_LIST
    entries = a.parse_files({f"{D}/site.list": mixed})
    decided = a.plan(entries, opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: []})
    assert decided["replace"] == []
    assert decided["conflicts"] == [
        {"file": f"{D}/site.list", "uri": f"{BASE}/amdgpu/30.10.2/ubuntu", "suite": "jammy", "signed_by": AMD_KEYRING}
    ]
    problem = a.conflict_problem(decided["conflicts"], decided["keyring"])
    assert "Conflicting values set for option Signed-By" in problem
    assert f"{D}/site.list names {BASE}/amdgpu/30.10.2/ubuntu jammy with signed-by {AMD_KEYRING}" in problem
    assert f"make their signed-by {OURS}" in problem


def test_a_mixed_file_naming_the_adopted_keyring_does_not_conflict():
    mixed = "deb http://archive.ubuntu.com/ubuntu jammy main\n" + AMDGPU_LIST
    decided = a.plan(
        a.parse_files({f"{D}/site.list": mixed}), opts(MANAGED_702, BASE, OWN, FPR, OURS), {AMD_KEYRING: [FPR]}
    )
    assert decided["keyring"] == AMD_KEYRING
    assert decided["conflicts"] == []


def test_the_roles_own_files_are_neither_replaced_nor_conflicting():
    entries = a.parse_files({f"{D}/rocm.sources": OUR_SOURCES})
    assert a.plan(entries, opts(MANAGED_702, BASE, OWN, FPR, OURS), {}) == {
        "keyring": OURS,
        "adopted": False,
        "replace": [],
        "conflicts": [],
    }


def test_an_entry_in_sources_list_itself_is_never_removed_but_reported():
    entries = a.parse_files({"/etc/apt/sources.list": f"deb {BASE}/rocm/apt/7.0.2 jammy main\n"})
    decided = a.plan(entries, opts(MANAGED_702, BASE, OWN, FPR, OURS), {})
    assert decided["replace"] == []
    assert decided["conflicts"][0]["signed_by"] is None
    assert "with signed-by (none)" in a.conflict_problem(decided["conflicts"], OURS)


def test_a_mirror_base_leaves_amds_own_host_alone():
    decided = a.plan(
        amd_way(), opts(["https://mirror.invalid/rocm/apt/7.0.2"], "https://mirror.invalid", OWN, FPR, OURS), {}
    )
    assert decided["replace"] == [] and decided["conflicts"] == [] and decided["keyring"] == OURS
