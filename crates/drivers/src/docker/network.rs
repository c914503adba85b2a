//! A bridge-mode group's network namespace for docker tasks (Nomad's `CreateNetwork`): a pause
//! container `nomad_init_<alloc id>` with network mode `none` holds the namespace; the client
//! configures it with CNI through its `SandboxKey`, the group's docker tasks join it with
//! `network_mode = "container:<id>"` and its other tasks by the same path.
//!
//! There is no registry to pull Kubernetes' pause image from on many machines, so the default
//! infra image is built locally on first use: a root file system holding one static program,
//! [`pause_program`], that sleeps in `pause(2)` for ever.

use super::{api_error, bounded, is_not_found, DockerDriver};
use crate::driver::{NetworkIsolation, LABEL_SANDBOX_CONTAINER};
use crate::error::DriverError;
use bollard::models::{ContainerCreateBody, HostConfig, RestartPolicy, RestartPolicyNameEnum};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use std::collections::HashMap;

/// The default `infra_image`, built by [`ensure_infra_image`] when missing.
pub const DEFAULT_INFRA_IMAGE: &str = "caravan-pause:1";

/// Marks the pause containers (never a task's: the dangling-container collector leaves them).
pub const LABEL_SANDBOX: &str = "com.caravan.network_sandbox";

/// The pause container's name, as Nomad's.
pub fn sandbox_name(alloc_id: &str) -> String {
    format!("nomad_init_{alloc_id}")
}

/// A static x86-64 Linux program (an ELF file of one loadable segment) that loops on
/// `pause(2)`: what Kubernetes' pause image does, minus the signal handlers (the container is
/// removed with SIGKILL).
pub fn pause_program() -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    const EHDR: u64 = 64;
    const PHDR: u64 = 56;
    // loop: mov eax, 34 (pause); syscall; jmp loop
    let code: [u8; 9] = [0xb8, 34, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7];
    let total = EHDR + PHDR + code.len() as u64;
    let mut f = Vec::with_capacity(total as usize);
    // ELF header: 64-bit, little endian, version 1, System V.
    f.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    f.extend_from_slice(&0x3eu16.to_le_bytes()); // EM_X86_64
    f.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
    f.extend_from_slice(&(BASE + EHDR + PHDR).to_le_bytes()); // entry
    f.extend_from_slice(&EHDR.to_le_bytes()); // program headers at
    f.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    f.extend_from_slice(&0u32.to_le_bytes()); // flags
    f.extend_from_slice(&(EHDR as u16).to_le_bytes());
    f.extend_from_slice(&(PHDR as u16).to_le_bytes());
    f.extend_from_slice(&1u16.to_le_bytes()); // one program header
    f.extend_from_slice(&64u16.to_le_bytes()); // section header size
    f.extend_from_slice(&0u16.to_le_bytes());
    f.extend_from_slice(&0u16.to_le_bytes());
    // PT_LOAD of the whole file, readable and executable.
    f.extend_from_slice(&1u32.to_le_bytes());
    f.extend_from_slice(&5u32.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes()); // offset
    f.extend_from_slice(&BASE.to_le_bytes()); // vaddr
    f.extend_from_slice(&BASE.to_le_bytes()); // paddr
    f.extend_from_slice(&total.to_le_bytes()); // filesz
    f.extend_from_slice(&total.to_le_bytes()); // memsz
    f.extend_from_slice(&0x1000u64.to_le_bytes()); // align
    f.extend_from_slice(&code);
    f
}

/// A root file system tarball holding `/pause`.
fn pause_rootfs() -> Result<Vec<u8>, std::io::Error> {
    let program = pause_program();
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(program.len() as u64);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_cksum();
    builder.append_data(&mut header, "pause", program.as_slice())?;
    builder.into_inner()
}

fn sandbox_error(alloc_id: &str, message: String) -> DriverError {
    DriverError::Start {
        task_id: alloc_id.to_string(),
        message,
        recoverable: true,
    }
}

/// Makes sure `image` exists: the default is built from [`pause_rootfs`], any other pulled.
async fn ensure_infra_image(
    docker: &Docker,
    alloc_id: &str,
    image: &str,
) -> Result<(), DriverError> {
    match bounded(
        alloc_id,
        "inspecting the infra image",
        docker.inspect_image(image),
    )
    .await?
    {
        Ok(_) => return Ok(()),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(api_error(alloc_id, "inspecting the infra image", e)),
    }
    let stream = if image == DEFAULT_INFRA_IMAGE {
        if std::env::consts::ARCH != "x86_64" {
            return Err(sandbox_error(
                alloc_id,
                format!(
                    "the built-in infra image is x86-64 only; set infra_image in plugin \"docker\" \
                     {{ config {{ … }} }} to a pause image for {}",
                    std::env::consts::ARCH
                ),
            ));
        }
        let rootfs = pause_rootfs()
            .map_err(|e| sandbox_error(alloc_id, format!("building the infra image: {e}")))?;
        let (repo, tag) = image.split_once(':').unwrap_or((image, "latest"));
        let options = CreateImageOptionsBuilder::new()
            .from_src("-")
            .repo(repo)
            .tag(tag)
            .changes(vec![r#"CMD ["/pause"]"#.to_string()])
            .build();
        docker.create_image(
            Some(options),
            Some(bollard::body_full(bytes::Bytes::from(rootfs))),
            None,
        )
    } else {
        let options = CreateImageOptionsBuilder::new().from_image(image).build();
        docker.create_image(Some(options), None, None)
    };
    let run = async move {
        let mut stream = stream;
        while let Some(item) = stream.next().await {
            item.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(300), run).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(sandbox_error(
            alloc_id,
            format!("getting the infra image {image}: {e}"),
        )),
        Err(_) => Err(sandbox_error(
            alloc_id,
            format!("getting the infra image {image}: no answer within 5m"),
        )),
    }
}

impl DockerDriver {
    /// The running pause container of `alloc_id`'s group, or a new one.
    pub(crate) async fn create_sandbox(
        &self,
        alloc_id: &str,
    ) -> Result<NetworkIsolation, DriverError> {
        let docker = self.client(alloc_id).await?;
        let name = sandbox_name(alloc_id);
        if let Some(spec) = running_sandbox(docker, alloc_id, &name).await? {
            return Ok(spec);
        }
        // A stopped leftover is replaced.
        remove_sandbox(docker, alloc_id, &name).await?;
        ensure_infra_image(docker, alloc_id, &self.config.infra_image).await?;
        let body = ContainerCreateBody {
            image: Some(self.config.infra_image.clone()),
            labels: Some(HashMap::from([
                (
                    super::container::LABEL_ALLOC_ID.to_string(),
                    alloc_id.to_string(),
                ),
                (LABEL_SANDBOX.to_string(), "1".to_string()),
            ])),
            host_config: Some(HostConfig {
                // A namespace with only the loopback, for CNI to configure.
                network_mode: Some("none".into()),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                    maximum_retry_count: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = bounded(
            alloc_id,
            "creating the pause container",
            docker.create_container(Some(options), body),
        )
        .await?
        .map_err(|e| api_error(alloc_id, "creating the pause container", e))?;
        let started = bounded(
            alloc_id,
            "starting the pause container",
            docker.start_container(&created.id, None),
        )
        .await
        .and_then(|r| r.map_err(|e| api_error(alloc_id, "starting the pause container", e)));
        if let Err(e) = started {
            let _ = remove_sandbox(docker, alloc_id, &created.id).await;
            return Err(e);
        }
        running_sandbox(docker, alloc_id, &created.id)
            .await?
            .ok_or_else(|| sandbox_error(alloc_id, "the pause container stopped at once".into()))
    }

    pub(crate) async fn destroy_sandbox(
        &self,
        alloc_id: &str,
        spec: &NetworkIsolation,
    ) -> Result<(), DriverError> {
        let docker = self.client(alloc_id).await?;
        let id = spec
            .labels
            .get(LABEL_SANDBOX_CONTAINER)
            .cloned()
            .unwrap_or_else(|| sandbox_name(alloc_id));
        remove_sandbox(docker, alloc_id, &id).await?;
        // A record without the id (a crash before it was kept) still finds it by name.
        if id != sandbox_name(alloc_id) {
            remove_sandbox(docker, alloc_id, &sandbox_name(alloc_id)).await?;
        }
        Ok(())
    }
}

/// The namespace of the container `name_or_id`, if it runs.
async fn running_sandbox(
    docker: &Docker,
    alloc_id: &str,
    name_or_id: &str,
) -> Result<Option<NetworkIsolation>, DriverError> {
    let inspected = bounded(
        alloc_id,
        "inspecting the pause container",
        docker.inspect_container(name_or_id, None),
    )
    .await?;
    let c = match inspected {
        Ok(c) => c,
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => return Err(api_error(alloc_id, "inspecting the pause container", e)),
    };
    let running = c.state.as_ref().and_then(|s| s.running) == Some(true);
    let key = c
        .network_settings
        .as_ref()
        .and_then(|n| n.sandbox_key.clone())
        .filter(|k| !k.is_empty());
    match (running, key, c.id) {
        (true, Some(key), Some(id)) => Ok(Some(NetworkIsolation {
            path: key.into(),
            labels: [(LABEL_SANDBOX_CONTAINER.to_string(), id)].into(),
        })),
        _ => Ok(None),
    }
}

async fn remove_sandbox(
    docker: &Docker,
    alloc_id: &str,
    name_or_id: &str,
) -> Result<(), DriverError> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match bounded(
        alloc_id,
        "removing the pause container",
        docker.remove_container(name_or_id, Some(options)),
    )
    .await?
    {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(api_error(alloc_id, "removing the pause container", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_program_is_a_well_formed_elf() {
        let p = pause_program();
        assert_eq!(&p[..4], b"\x7fELF");
        assert_eq!(p.len(), 64 + 56 + 9);
        let entry = u64::from_le_bytes(p[24..32].try_into().unwrap());
        assert_eq!(entry, 0x40_0000 + 120);
        // The file size in the program header covers the whole file.
        let filesz = u64::from_le_bytes(p[64 + 32..64 + 40].try_into().unwrap());
        assert_eq!(filesz, p.len() as u64);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_pause_program_runs_until_killed() {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("caravan-pause-{}", std::process::id()));
        std::fs::write(&path, pause_program()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Another test's fork may briefly hold the file open for writing (ETXTBSY).
        let mut child = (0..50)
            .find_map(|_| match std::process::Command::new(&path).spawn() {
                Ok(c) => Some(c),
                Err(e) if e.raw_os_error() == Some(26) => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    None
                }
                Err(e) => panic!("{e}"),
            })
            .expect("spawned");
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(child.try_wait().unwrap().is_none(), "it must keep running");
        child.kill().unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
        let _ = std::fs::remove_file(&path);
    }
}
