//! Filesystems a test mounts for itself, to make real system calls fail:
//! a small tmpfs (writes fail with ENOSPC when it is full; it can be grown
//! again), and ext4 on a loop device that can be shut down (every read,
//! write and flush then fails with EIO, as on a failing disk).
//!
//! Both are mounted under a fresh temporary directory and unmounted (lazily,
//! so a busy mount cannot stay behind) when dropped. They need root; use
//! [`available`] to skip or (under `CI`) fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::tmpdir::TempDir;

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Whether this process may mount filesystems (root, `mount` present; with
/// `ext4`, also `mkfs.ext4` and a loop device). Without, [`crate::ci`]
/// decides: `Ok(false)` (skip) or an error under `CI`.
pub fn available(ext4: bool) -> anyhow::Result<bool> {
    if !nix::unistd::Uid::effective().is_root() {
        crate::ci::unavailable("needs root to mount a test filesystem")?;
        return Ok(false);
    }
    let mut need = vec!["mount", "umount"];
    if ext4 {
        need.push("mkfs.ext4");
    }
    for p in need {
        if crate::ci::find_program(p).is_none() {
            crate::ci::unavailable(&format!("needs `{p}` to mount a test filesystem"))?;
            return Ok(false);
        }
    }
    if ext4 && !Path::new("/dev/loop-control").exists() {
        crate::ci::unavailable("needs loop devices (/dev/loop-control) for an ext4 image")?;
        return Ok(false);
    }
    Ok(true)
}

/// A tmpfs of a given size, mounted until dropped.
#[derive(Debug)]
pub struct Tmpfs {
    dir: TempDir,
    mounted: bool,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` on a fresh directory.
    pub fn mount(bytes: u64) -> anyhow::Result<Self> {
        let dir = TempDir::new("tmpfs")?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes},mode=0755"))
            .arg("weir-test")
            .arg(dir.path()))?;
        Ok(Self { dir, mounted: true })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Changes its size (more room, or less).
    pub fn resize(&self, bytes: u64) -> anyhow::Result<()> {
        run(Command::new("mount")
            .arg("-o")
            .arg(format!("remount,size={bytes}"))
            .arg(self.dir.path()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
            self.mounted = false;
        }
    }
}

/// An ext4 filesystem in an image file on a loop device, mounted until
/// dropped; [`Ext4::shut_down`] makes every I/O on it fail with EIO.
#[derive(Debug)]
pub struct Ext4 {
    dir: TempDir,
    mnt: PathBuf,
    mounted: bool,
}

impl Ext4 {
    /// Makes a `bytes` ext4 image and mounts it.
    pub fn mount(bytes: u64) -> anyhow::Result<Self> {
        let dir = TempDir::new("ext4")?;
        let img = dir.path().join("fs.img");
        std::fs::File::create(&img)?.set_len(bytes)?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img))?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir_all(&mnt)?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt))?;
        Ok(Self {
            dir,
            mnt,
            mounted: true,
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// Shuts the filesystem down as ext4 does on a fatal disk error
    /// (`EXT4_IOC_SHUTDOWN`, without flushing the journal): from now on
    /// reads, writes and flushes on it fail with EIO.
    pub fn shut_down(&self) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd;
        /// `_IOR('X', 125, __u32)`.
        const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587d;
        /// Do not flush the journal: the disk is "gone".
        const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;
        let d = std::fs::File::open(&self.mnt)?;
        let flags = EXT4_GOING_FLAGS_NOLOGFLUSH;
        // SAFETY: the ioctl reads one u32 through the pointer, which points
        // at a live local u32 for the duration of the call; the descriptor
        // is open (owned by `d`, alive until the end of this function).
        #[allow(unsafe_code)]
        let r = unsafe { libc::ioctl(d.as_raw_fd(), EXT4_IOC_SHUTDOWN, &flags as *const u32) };
        if r != 0 {
            bail!(
                "EXT4_IOC_SHUTDOWN on {}: {}",
                self.mnt.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }

    /// The directory holding the image (removed on drop).
    pub fn image_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        if self.mounted {
            // A lazy unmount also frees the loop device (mounted with -o loop).
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            self.mounted = false;
        }
    }
}
