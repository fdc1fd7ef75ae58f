//! The runtime home, `$CICY_HOME` (default `~/.cicy`), and the paths inside it (docs/design.md §2).
//!
//! Owns path names only; it reads and writes nothing except creating folders on request.

use std::path::{Path, PathBuf};

/// The runtime home folder and the well-known paths inside it.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

/// Errors locating the home.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("neither CICY_HOME nor HOME is set; set CICY_HOME to the folder cicy should use")]
    NoHome,
    #[error("cannot make {path} absolute: the current folder is unknown: {source}")]
    Absolute { path: PathBuf, source: std::io::Error },
    #[error("cannot create {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
}

impl Home {
    /// A home at an explicit folder (tests use a temporary one).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `$CICY_HOME`, else `$HOME/.cicy`, made absolute against the current folder (which need
    /// not exist yet): workspace paths derived from it are stored in the registry and must
    /// still be right when cicy-agent runs from another folder.
    pub fn from_env() -> Result<Self, HomeError> {
        if let Some(h) = std::env::var_os("CICY_HOME").filter(|v| !v.is_empty()) {
            return Ok(Self::at(absolute(Path::new(&h))?));
        }
        let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or(HomeError::NoHome)?;
        Ok(Self::at(absolute(&PathBuf::from(home).join(".cicy"))?))
    }

    /// Creates the home folder if missing.
    pub fn ensure(&self) -> Result<(), HomeError> {
        std::fs::create_dir_all(&self.root).map_err(|source| HomeError::Create { path: self.root.clone(), source })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `cicy.db`, the SQLite registry.
    pub fn db_path(&self) -> PathBuf {
        self.root.join("cicy.db")
    }

    /// `config.yaml` (optional).
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.yaml")
    }

    /// `lite-config.json` (optional; overrides the packaged one per key).
    pub fn lite_config_path(&self) -> PathBuf {
        self.root.join("lite-config.json")
    }

    /// `roles/`, user role templates.
    pub fn roles_dir(&self) -> PathBuf {
        self.root.join("roles")
    }

    /// `skills/`, installed skills.
    pub fn skills_dir(&self) -> PathBuf {
        self.root.join("skills")
    }

    /// `workers/<id>`, the default workspace of an agent.
    pub fn default_workspace(&self, agent_id: &str) -> PathBuf {
        self.root.join("workers").join(agent_id)
    }
}

fn absolute(p: &Path) -> Result<PathBuf, HomeError> {
    std::path::absolute(p).map_err(|source| HomeError::Absolute { path: p.to_path_buf(), source })
}
