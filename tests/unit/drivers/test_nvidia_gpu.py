from cyborg.drivers import nvidia_gpu
from cyborg.objects import inventory
from tests.fixtures import fake_nvml
from tests.fixtures import sysfs as fake_sysfs

A100 = {'name': 'NVIDIA A100-PCIE-40GB', 'uuid': 'GPU-1111', 'serial':
        '1320221000001', 'memory_mb': 40960}


def _discover(conf, nvml=None):
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    driver.name = 'nvidia_gpu_driver'
    return {dep.name: dep for dev in driver.discover()
            for dep in dev.deployables}, driver


def test_nvml_adds_memory_serial_uuid_and_model(conf, scenario, tmp_path):
    scenario('nvidia_sriov')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {'0000:3b:00.0': A100})
    deps, driver = _discover(conf, nvml)
    whole = deps['h_0000:3b:00.0']
    assert whole.attributes['memory_mb'] == '40960'
    assert whole.attributes['serial'] == '1320221000001'
    assert whole.attributes['gpu_uuid'] == 'GPU-1111'
    devices = {d.controlpath_id.cpid_info: d for d in driver.discover()}
    assert devices['0000:3b:00.0'].model == 'NVIDIA A100-PCIE-40GB'
    # GPUs NVML does not know still come from sysfs.
    assert 'memory_mb' not in deps['h_0000:86:00.0_nvidia-471'].attributes
    assert nvml.initialised == 0      # every session is shut down


def test_a_gpu_without_a_serial_number_keeps_what_nvml_reads(
        conf, scenario, tmp_path):
    """A GPU with no inforom answers NOT_SUPPORTED for its serial number:
    that value is left out, not everything NVML could read (memory, UUID,
    model, MIG mode), with a warning at every discovery."""
    scenario('nvidia_sriov')
    gpu = {k: v for k, v in A100.items() if k != 'serial'}
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {'0000:3b:00.0': gpu})
    deps, driver = _discover(conf, nvml)
    whole = deps['h_0000:3b:00.0']
    assert whole.attributes['memory_mb'] == '40960'
    assert whole.attributes['gpu_uuid'] == 'GPU-1111'
    assert 'serial' not in whole.attributes
    devices = {d.controlpath_id.cpid_info: d for d in driver.discover()}
    assert devices['0000:3b:00.0'].model == 'NVIDIA A100-PCIE-40GB'


def test_mig_instances_are_deployables(conf, scenario, tmp_path):
    scenario('nvidia_sriov')
    gpu = dict(A100, mig=[
        {'gpu_instance_id': 1, 'profile': '3g.20gb', 'memory_mb': 20096,
         'uuid': 'MIG-aaaa'},
        {'gpu_instance_id': 5, 'profile': '1g.5gb', 'memory_mb': 4864,
         'uuid': 'MIG-bbbb'}])
    deps, _ = _discover(conf, fake_nvml.create(tmp_path / 'nvml.json',
                                               {'0000:3b:00.0': gpu}))
    assert 'h_0000:3b:00.0' not in deps
    mig = deps['h_0000:3b:00.0_MIG5']
    assert mig.attributes['rc'] == 'CUSTOM_MIG_1G_5GB'
    assert 'CUSTOM_NVIDIA_MIG_1G_5GB' in mig.traits
    assert mig.attributes['mig_uuid'] == 'MIG-bbbb'
    assert deps['h_0000:3b:00.0_MIG1'].attributes['memory_mb'] == '20096'


def test_nvml_that_cannot_start_means_sysfs_only(conf, scenario, tmp_path):
    scenario('nvidia_sriov')
    failing = fake_nvml.create(tmp_path / 'nvml.json', {},
                               driver_loaded=False)
    with_failing, _ = _discover(conf, failing)
    without, _ = _discover(conf, nvml=None)
    assert with_failing.keys() == without.keys()


def test_a_mig_gpu_nvml_cannot_read_keeps_its_instances(conf, scenario,
                                                       tmp_path):
    """NVML failing (not started, a GPU it cannot read) for a GPU it said
    was in MIG mode: its MIG instances are reported as last seen, never the
    whole GPU beside the instances still running on it.  Once NVML reads it
    again, what it says goes (here: MIG mode turned off)."""
    scenario('nvidia_sriov')
    gpu = dict(A100, mig=[{'gpu_instance_id': 1, 'profile': '3g.20gb',
                           'memory_mb': 20096, 'uuid': 'MIG-aaaa'}])
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {'0000:3b:00.0': gpu})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)

    def names():
        return sorted(dep.name for dev in driver.discover()
                      for dep in dev.deployables
                      if dep.name.startswith('h_0000:3b:00.0'))

    assert names() == ['h_0000:3b:00.0_MIG1']
    state = nvml.read()
    nvml.write(dict(state, driver_loaded=False))
    assert names() == ['h_0000:3b:00.0_MIG1']
    nvml.write(state)
    nvml.update_gpu('0000:3b:00.0', lost=True)
    assert names() == ['h_0000:3b:00.0_MIG1']
    nvml.update_gpu('0000:3b:00.0', lost=False, mig=False)
    assert names() == ['h_0000:3b:00.0']
    # Not in MIG mode when last read: NVML failing leaves it whole.
    nvml.write(dict(nvml.read(), driver_loaded=False))
    assert names() == ['h_0000:3b:00.0']


def _mig_names(driver):
    return sorted(dep.name for dev in driver.discover()
                  for dep in dev.deployables
                  if dep.name.startswith('h_0000:3b:00.0'))


def test_a_restarted_agent_keeps_a_mig_gpu_nvml_cannot_read(conf, scenario,
                                                            tmp_path):
    """The MIG GPUs the conductor last acknowledged (the agent's cache,
    given to ``recall`` at start) are remembered as such: an agent started
    while NVML fails reports their instances, not the whole GPU beside
    them.  A GPU taken out of sysfs is forgotten: whatever comes back at
    its address is read afresh."""
    tree = scenario('nvidia_sriov')
    gpu = dict(A100, mig=[{'gpu_instance_id': 1, 'profile': '3g.20gb',
                           'memory_mb': 20096, 'uuid': 'MIG-aaaa'}])
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {'0000:3b:00.0': gpu})
    before = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    acknowledged = before.discover()
    nvml.write(dict(nvml.read(), driver_loaded=False))

    fresh = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    assert _mig_names(fresh) == ['h_0000:3b:00.0']     # nothing recalled
    restarted = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    restarted.recall(acknowledged)
    assert _mig_names(restarted) == ['h_0000:3b:00.0_MIG1']

    tree.remove_pci('0000:3b:00.0')
    assert _mig_names(restarted) == []
    tree.add_pci('0000:3b:00.0', *fake_sysfs.A100, driver='nvidia')
    assert _mig_names(restarted) == ['h_0000:3b:00.0']


def test_enabling_vfs_takes_the_gpu_off_as_whole(conf, scenario):
    tree = scenario('nvidia_sriov')
    tree.add_vfs('0000:3b:00.0', ['0000:3b:00.4', '0000:3b:00.5'],
                 driver='nvidia')
    deps, _ = _discover(conf)
    # VFs on but no vGPU type they offer is enabled: not offered at all,
    # and never as two more physical GPUs.
    assert not [n for n in deps if n.startswith('h_0000:3b:00')]
    for vf in ('0000:3b:00.4', '0000:3b:00.5'):
        tree.add_mdev_type(vf, 'nvidia-471', 'GRID A100-4C', 1)
    deps, _ = _discover(conf)
    assert deps['h_0000:3b:00.0_nvidia-471'].num_accelerators == 2


def test_a_vf_s_vgpu_handles_keep_their_identity_when_another_vf_changes(
        conf, scenario):
    """SR-IOV vGPUs of two types, one VF each: a vGPU of one type made on
    the first VF (which then offers no other) leaves the handles of the
    VF after it as they were (the conductor would otherwise replace them,
    keeping the old one while it is in use beside a new free one for the
    same slot)."""
    tree = scenario('nvidia_sriov')
    vfs = ['0000:3b:00.4', '0000:3b:00.5']
    tree.add_vfs('0000:3b:00.0', vfs, driver='nvidia')
    for vf in vfs:
        tree.add_mdev_type(vf, 'nvidia-471', 'GRID A100-4C', 1)
        tree.add_mdev_type(vf, 'nvidia-472', 'GRID A100-8C', 1)
    conf.set_override('enabled_vgpu_types', ['nvidia-471', 'nvidia-472'],
                      'agent')

    def handles(deps, mdev_type, parent=None):
        return sorted(
            h.key() for h in
            deps['h_0000:3b:00.0_' + mdev_type].attach_handles
            if parent in (None, inventory.pci_address(h.attach_info)))

    before, _ = _discover(conf)
    tree.add_mdev(vfs[0], '7a3c9e51-0d4b-4f6e-9a2b-3c1d5e7f9a0b',
                  'nvidia-471')
    tree.set_available(vfs[0], 'nvidia-471', 0)
    tree.set_available(vfs[0], 'nvidia-472', 0)
    after, _ = _discover(conf)
    assert handles(after, 'nvidia-472') == handles(before, 'nvidia-472',
                                                   parent=vfs[1])
    assert handles(after, 'nvidia-471') == handles(before, 'nvidia-471')


def test_excluded_gpu_comes_back_when_no_longer_excluded(conf, scenario):
    scenario('nvidia_sriov')
    conf.set_override('nvidia_excluded_devices', [], 'agent')
    deps, _ = _discover(conf)
    assert deps['h_0000:af:00.0'].resource_class == 'PGPU'


def test_whole_gpu_once_its_mdevs_and_types_are_gone(conf, tmp_path):
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci('0000:41:00.0', *fake_sysfs.T4, driver='nvidia')
    tree.add_mdev_type('0000:41:00.0', 'nvidia-223', 'GRID T4-2B', 8)
    conf.set_override('sysfs_root', str(tmp_path / 'sys'), 'agent')
    deps, _ = _discover(conf)
    # Types the GPU supports but nobody enabled: the GPU is offered whole.
    assert list(deps) == ['h_0000:41:00.0']
    tree.add_mdev('0000:41:00.0', fake_sysfs.MDEV_C, 'nvidia-223')
    tree.set_available('0000:41:00.0', 'nvidia-223', 7)
    deps, _ = _discover(conf)
    # An mdev exists: its type is in use, the GPU is not whole any more.
    assert list(deps) == ['h_0000:41:00.0_nvidia-223']
    assert deps['h_0000:41:00.0_nvidia-223'].num_accelerators == 8


def test_a_gpu_instance_split_in_compute_instances_names_each(
        conf, scenario, tmp_path):
    """A GPU instance split into two compute instances is two MIG
    devices with one GPU instance id: both were named ..._MIG1, and the
    conductor refused the whole report of the host (a deployable
    reported twice) at every period.  The first keeps its name."""
    from cyborg.conductor import inventory_plan
    from cyborg.agent import reporter as agent_reporter

    scenario('nvidia_sriov')
    gpu = dict(A100, mig=[
        {'gpu_instance_id': 1, 'compute_instance_id': 0,
         'profile': '1c.3g.20gb', 'memory_mb': 20096, 'uuid': 'MIG-a'},
        {'gpu_instance_id': 1, 'compute_instance_id': 1,
         'profile': '1c.3g.20gb', 'memory_mb': 20096, 'uuid': 'MIG-b'},
        {'gpu_instance_id': 2, 'profile': '3g.20gb', 'memory_mb': 20096,
         'uuid': 'MIG-c'}])
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {'0000:3b:00.0': gpu})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    driver.name = 'nvidia_gpu_driver'
    assert _mig_names(driver) == ['h_0000:3b:00.0_MIG1',
                                  'h_0000:3b:00.0_MIG1.1',
                                  'h_0000:3b:00.0_MIG2']
    devices = driver.discover()
    report = agent_reporter.build_report(devices, None, None, True)
    assert inventory_plan.parse_report(report).devices
    # An application's XID in the second compute instance is that
    # instance's.
    nvml.update_gpu('0000:3b:00.0', events=True)
    driver.check_health(devices)
    nvml.add_xid('0000:3b:00.0', 13, gpu_instance_id=1,
                 compute_instance_id=1)
    assert [r.deployable for r in driver.check_health(devices)
            if r.code == 'xid:13'] == ['h_0000:3b:00.0_MIG1.1']


# -- SR-IOV vGPU capacity ----------------------------------------------------

# An A100 40GB's GRID A100-10C: four per GPU, as its description says.
A100_10C = ('nvidia-474', 'GRID A100-10C',
            'num_heads=1, frl_config=60, framebuffer=10240M, '
            'max_resolution=4096x2160, max_instance=4')
A100_8C = ('nvidia-473', 'GRID A100-8C',
           'num_heads=1, frl_config=60, framebuffer=8192M, '
           'max_resolution=4096x2160, max_instance=5')


def _sriov_gpu(tree, conf, vfs=8, types=(A100_10C,)):
    """The scenario's whole A100 with ``vfs`` VFs, each free VF offering
    every type once (as NVIDIA's driver shows them), and ``types[0]``
    enabled; returns the VFs' addresses."""
    addresses = ['0000:3b:%02x.%d' % (i // 8, i % 8)
                 for i in range(4, vfs + 4)]
    tree.add_vfs('0000:3b:00.0', addresses, driver='nvidia')
    for vf in addresses:
        for type_id, name, description in types:
            tree.add_mdev_type(vf, type_id, name, 1, description=description)
    conf.set_override('enabled_vgpu_types', [types[0][0]], 'agent')
    return addresses


def _make_vgpu(tree, vf, mdev_uuid, mdev_type, types=(A100_10C,)):
    """A vGPU made on ``vf``, which then offers no type."""
    tree.add_mdev(vf, mdev_uuid, mdev_type)
    for type_id, _name, _description in types:
        tree.set_available(vf, type_id, 0)


def _vfs_offered(deployable):
    return [inventory.pci_address(h.attach_info)
            for h in deployable.attach_handles]


def test_max_instance_is_read_off_the_type_description():
    assert nvidia_gpu.max_instance(A100_10C[2]) == 4
    assert nvidia_gpu.max_instance('max_instance=16') == 16
    assert nvidia_gpu.max_instance(
        'num_heads=4, frl_config=60, framebuffer=2048M, '
        'max_resolution=5120x2880') is None
    assert nvidia_gpu.max_instance('') is None


def test_sriov_vgpus_are_offered_as_many_as_the_gpu_hosts(conf, scenario):
    """Each free VF says 1 for a type the GPU can still host: 8 VFs
    offered 8 vGPUs of a type that fits 4 times, and binds past the 4th
    failed making the mdev.  The free VFs offered are capped at the
    type's max_instance minus the vGPUs on the GPU; a VF holding one is
    always offered (an instance may have it), free ones beyond the cap
    are not."""
    from cyborg.placement import provider_tree

    tree = scenario('nvidia_sriov')
    vfs = _sriov_gpu(tree, conf)
    deps, _ = _discover(conf)
    vgpu = deps['h_0000:3b:00.0_nvidia-474']
    assert vgpu.num_accelerators == 4
    assert _vfs_offered(vgpu) == vfs[:4]
    # Two vGPUs made: one on a VF offered, one on a VF that was not
    # (made by hand): both stay offered, and 2 free VFs beside them.
    _make_vgpu(tree, vfs[1], fake_sysfs.MDEV_A, 'nvidia-474')
    _make_vgpu(tree, vfs[6], fake_sysfs.MDEV_B, 'nvidia-474')
    deps, _ = _discover(conf)
    vgpu = deps['h_0000:3b:00.0_nvidia-474']
    assert vgpu.num_accelerators == 4
    assert _vfs_offered(vgpu) == [vfs[0], vfs[1], vfs[2], vfs[6]]
    # Placement's inventory follows: 4 in all, none reserved (the two
    # bound are allocations, the two free ones are what is left).
    provider = provider_tree.provider_for(
        {'name': vgpu.name, 'num_accelerators': vgpu.num_accelerators},
        vgpu.attributes, 'enabled', 'compute-node-uuid')
    assert {k: provider.inventories['VGPU'][k]
            for k in ('total', 'reserved')} == {'total': 4, 'reserved': 0}
    # Full: the vGPUs in use alone, never fewer.
    _make_vgpu(tree, vfs[0], fake_sysfs.MDEV_C, 'nvidia-474')
    _make_vgpu(tree, vfs[7], fake_sysfs.MDEV_D, 'nvidia-474')
    deps, _ = _discover(conf)
    assert _vfs_offered(deps['h_0000:3b:00.0_nvidia-474']) == [
        vfs[0], vfs[1], vfs[6], vfs[7]]


def test_sriov_vgpus_without_max_instance_are_one_per_free_vf(conf,
                                                              scenario):
    """A description without max_instance (an older vGPU driver): every
    free VF is offered, as before."""
    tree = scenario('nvidia_sriov')
    vfs = _sriov_gpu(tree, conf, types=[(
        'nvidia-474', 'GRID A100-10C', 'num_heads=1, frl_config=60, '
        'framebuffer=10240M, max_resolution=4096x2160')])
    deps, _ = _discover(conf)
    assert _vfs_offered(deps['h_0000:3b:00.0_nvidia-474']) == vfs


def test_vgpus_of_another_type_take_room_unless_the_gpu_is_in_mig_mode(
        conf, scenario, tmp_path):
    """Time-sliced vGPUs on one GPU are all of one type: a vGPU of any
    type takes one of the places.  In MIG mode each is on its own slice,
    and only those of the type count against its max_instance."""
    tree = scenario('nvidia_sriov')
    types = (A100_10C, A100_8C)
    vfs = _sriov_gpu(tree, conf, types=types)
    _make_vgpu(tree, vfs[0], fake_sysfs.MDEV_A, 'nvidia-473', types)
    deps, _ = _discover(conf)
    # 4 - 1 free VFs for the enabled type; the existing type's deployable
    # keeps its vGPU and offers 5 - 1 free ones.
    assert _vfs_offered(deps['h_0000:3b:00.0_nvidia-474']) == vfs[1:4]
    assert _vfs_offered(deps['h_0000:3b:00.0_nvidia-473']) == vfs[:5]
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {'0000:3b:00.0': dict(
        A100, mig=[{'gpu_instance_id': 1, 'profile': '3g.20gb',
                    'memory_mb': 20096, 'uuid': 'MIG-aaaa'}])})
    deps, _ = _discover(conf, nvml)
    assert _vfs_offered(deps['h_0000:3b:00.0_nvidia-474']) == vfs[1:5]
