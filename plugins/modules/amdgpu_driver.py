#!/usr/bin/python
# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: amdgpu_driver
short_description: Compare the amdgpu driver a node runs with the one DKMS installed, and read Secure Boot
version_added: 0.1.0
author: instinct.finetune maintainers (@instinct-finetune)
description:
  - Reads the loaded amdgpu (C(/sys/module/amdgpu) and its C(version) file, which AMD's DKMS module has and
    the kernel's in-tree one has not) and the amdgpu versions C(dkms status) lists as installed for the running
    kernel, and decides whether the node runs the installed driver.
  - The decision is made on every run from what is on the node, so a reboot that is still owed is reported until
    the node is rebooted, not only on the run that changed the package.
  - Where both are known, the loaded module's C(srcversion) must also be that of the installed file (read with
    C(modinfo)), because AMD's point releases can share an upstream version (amdgpu 30.10.1 and 30.10.2 both
    report 6.14.14).
  - A driver installed since the node booted (its module file is newer than the boot) and not running needs a
    reboot; one that was there at boot and is not running failed to load (C(not-loaded)) or was left out of
    the boot (C(stale)), which another reboot would not mend.
  - Also reads the Secure Boot state (C(mokutil --sb-state), or the SecureBoot EFI variable when mokutil is not
    installed) and whether the key dkms signs modules with (Ubuntu's or Debian's) is enrolled, and says why a
    DKMS module would not load.
  - Never changes anything on the host.
options:
  kernel:
    description: The kernel release to compare for; the running kernel when empty.
    type: str
    default: ""
  after_reboot:
    description:
      - The caller has just rebooted the node. A driver still not running, or a booted kernel without a DKMS
        build, is then a problem another reboot would not mend, and RV(problem) says so.
    type: bool
    default: false
extends_documentation_fragment:
  - instinct.finetune.read_only
seealso:
  - module: instinct.finetune.rocminfo_facts
notes:
  - The comparison uses the driver's own version (C(6.14.14) of DKMS module version C(6.14.14-2226257.22.04)),
    the form the module reports, and the srcversion where modinfo can read the installed file.
"""

EXAMPLES = r"""
- name: Read the loaded and the installed amdgpu driver
  instinct.finetune.amdgpu_driver:
  register: driver

- name: Stop when the node still runs another driver than the installed one
  ansible.builtin.fail:
    msg: "reboot required: {{ driver.loaded_version }} loaded, {{ driver.installed_version }} installed"
  when: driver.state == 'reboot-required'
"""

RETURN = r"""
state:
  description:
    - C(current), the loaded driver is the installed one; C(reboot-required), installed since the boot (or when
      unknown) and another or none loaded; C(stale), installed before this boot and another driver loaded;
      C(not-loaded), installed before this boot and none loaded; C(no-dkms), no amdgpu installed by DKMS for
      the kernel.
  returned: always
  type: str
  sample: reboot-required
kernel:
  description: The kernel release compared for.
  returned: always
  type: str
  sample: 6.8.0-45-generic
loaded:
  description: Whether an amdgpu module is loaded.
  returned: always
  type: bool
  sample: true
loaded_description:
  description: The loaded driver in words, for messages.
  returned: always
  type: str
  sample: amdgpu 6.12.12 loaded
loaded_version:
  description: The loaded module's version; null for the in-tree driver or none loaded.
  returned: always
  type: str
  sample: 6.12.12
installed_version:
  description: The newest DKMS amdgpu version installed for the kernel; null when there is none.
  returned: always
  type: str
  sample: 6.14.14-2226257.22.04
installed_since_boot:
  description: Whether the installed module file is newer than the boot; null when unknown.
  returned: always
  type: bool
  sample: true
dkms_status:
  description: The lines of C(dkms status amdgpu); empty without dkms.
  returned: always
  type: list
  elements: str
  sample: ["amdgpu/6.14.14-2226257.22.04, 6.8.0-45-generic, x86_64: installed"]
problem:
  description: What stops the node, with the fix, from RV(state); null when nothing does.
  returned: always
  type: str
  sample: "reboot required: amdgpu 6.12.12 loaded, and DKMS installed amdgpu 6.14.14-2226257.22.04 for kernel ..."
runbook:
  description: The runbook page of RV(problem); null when there is none.
  returned: always
  type: str
  sample: reboot-required.md
secure_boot:
  description: C(enabled), C(disabled), C(unsupported) (no EFI, or not visible) or C(unknown).
  returned: always
  type: str
  sample: disabled
mok_key:
  description:
    - The key dkms signs modules with, where it exists (Ubuntu's C(/var/lib/shim-signed/mok/MOK.der), Debian's
      C(/var/lib/dkms/mok.pub)); null when neither does.
  returned: always
  type: str
  sample: /var/lib/shim-signed/mok/MOK.der
mok_key_pending:
  description: Whether that key was imported and its enrollment waits for the console's confirmation at the next boot.
  returned: always
  type: bool
  sample: false
mok_key_present:
  description: Whether such a key exists.
  returned: always
  type: bool
  sample: false
mok_key_enrolled:
  description:
    - Whether that key is enrolled (C(mokutil --test-key)); null when unknown or not asked.
    - False while its enrollment waits for the console's confirmation (RV(mok_key_pending)).
  returned: always
  type: bool
  sample: null
secure_boot_problem:
  description: Why a DKMS module would not load under Secure Boot, with the fix; null when it would.
  returned: always
  type: str
  sample: null
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.instinct.finetune.plugins.module_utils.driver import (
    MOK_KEYS,
    MOK_PENDING,
    SB_ENABLED,
    describe_loaded,
    driver_problem,
    driver_state,
    parse_mok_test_key,
    parse_sb_efivar,
    parse_sb_state,
    secure_boot_problem,
)
from ansible_collections.instinct.finetune.plugins.module_utils.sysfs import read_text

MODULE_DIR = "/sys/module/amdgpu"
SB_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def boot_time():
    for line in (read_text("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    return None


def installed_module(module, kernel):
    """The amdgpu module file DKMS installed for the kernel (the newest if several): its modification
    time and its srcversion (None where modinfo cannot read it)."""
    paths = glob.glob(f"/lib/modules/{kernel}/updates/dkms/amdgpu.ko*")
    paths += glob.glob(f"/var/lib/dkms/amdgpu/*/{kernel}/*/module/amdgpu.ko*")
    paths = sorted((path for path in paths if os.path.exists(path)), key=os.path.getmtime)
    if not paths:
        return None
    srcversion = None
    modinfo = module.get_bin_path("modinfo")
    if modinfo:
        rc, out, _err = module.run_command([modinfo, "-F", "srcversion", paths[-1]])
        srcversion = out.strip() or None if rc == 0 else None
    return {"mtime": os.path.getmtime(paths[-1]), "srcversion": srcversion}


def secure_boot(module):
    mokutil = module.get_bin_path("mokutil")
    if mokutil:
        _rc, out, err = module.run_command([mokutil, "--sb-state"])
        state = parse_sb_state(out + err)
    else:
        state = parse_sb_efivar(read_bytes(SB_EFIVAR))
    key = next((path for path in MOK_KEYS if os.path.exists(path)), None)
    enrolled = None
    if state == SB_ENABLED and key and mokutil:
        _rc, out, err = module.run_command([mokutil, "--test-key", key])
        enrolled = parse_mok_test_key(out + err)
    return {
        "secure_boot": state,
        "mok_key": key,
        "mok_key_present": key is not None,
        "mok_key_enrolled": False if enrolled == MOK_PENDING else enrolled,
        "mok_key_pending": enrolled == MOK_PENDING,
        "secure_boot_problem": secure_boot_problem(state, key, enrolled),
    }


def main():
    module = AnsibleModule(
        argument_spec={"kernel": {"type": "str", "default": ""}, "after_reboot": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )
    kernel = module.params["kernel"] or os.uname().release
    dkms = module.get_bin_path("dkms")
    dkms_text = ""
    if dkms:
        rc, out, err = module.run_command([dkms, "status", "amdgpu"])
        if rc != 0:
            module.fail_json(
                msg=f"dkms status amdgpu failed (rc {rc}): {err.strip() or out.strip()}. Check the DKMS tree "
                "(/var/lib/dkms) and `dkms status`. See docs/runbooks/driver-not-loaded.md"
            )
        dkms_text = out
    loaded = None
    if os.path.isdir(MODULE_DIR):
        loaded = {
            "version": read_text(os.path.join(MODULE_DIR, "version")) or "",
            "srcversion": read_text(os.path.join(MODULE_DIR, "srcversion")),
        }
    state = driver_state(kernel, dkms_text, loaded, installed_module(module, kernel), boot_time())
    problem = driver_problem(dict(state, kernel=kernel), module.params["after_reboot"])
    module.exit_json(
        changed=False,
        kernel=kernel,
        problem=problem[0] if problem else None,
        runbook=problem[1] if problem else None,
        dkms_status=dkms_text.splitlines(),
        loaded_description=describe_loaded(state),
        **state,
        **secure_boot(module),
    )


if __name__ == "__main__":
    main()
