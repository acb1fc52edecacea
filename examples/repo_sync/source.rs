//! Where a repository's files come from: a local git repository, or a GitLab project when the
//! source is an `http(s)://` URL (token from `GITLAB_TOKEN`; the `http` feature). One async
//! interface over both; git runs as child processes on Tokio's blocking pool. A build without
//! `http` refuses a GitLab source, saying how to build it in.

use std::path::PathBuf;

#[cfg(feature = "http")]
use futures_util::StreamExt;

use crate::git::{Blob, BlobReader, Changes, GitError, Repo};
#[cfg(feature = "http")]
use crate::gitlab::{GitLabError, GitLabProject};

/// A repository source.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Git(Repo),
    #[cfg(feature = "http")]
    GitLab(GitLabProject),
}

/// Why a source could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SourceError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[cfg(feature = "http")]
    #[error(transparent)]
    GitLab(#[from] GitLabError),
    /// A GitLab project, in a build without the `http` feature.
    #[cfg(not(feature = "http"))]
    #[error("{0}")]
    NotBuilt(String),
}

impl SourceError {
    /// The change list cannot be had: the commit is unknown to the source (history rewritten),
    /// or GitLab gave up computing the comparison. Sync everything instead.
    pub(crate) fn needs_full_listing(&self) -> bool {
        match self {
            SourceError::Git(GitError::UnknownRevision { .. }) => true,
            #[cfg(feature = "http")]
            SourceError::GitLab(GitLabError::UnknownRevision { .. }) => true,
            #[cfg(feature = "http")]
            SourceError::GitLab(GitLabError::InvalidResponse { detail, .. }) => {
                detail.contains("compare_timeout")
            }
            _ => false,
        }
    }
}

/// Whether a schedule's source names a GitLab project rather than a local path.
pub(crate) fn is_remote(source: &str) -> bool {
    source.starts_with("http://") || source.starts_with("https://")
}

impl Source {
    pub(crate) async fn open(
        source: &str,
        gitlab_token: Option<String>,
    ) -> Result<Self, SourceError> {
        if is_remote(source) {
            #[cfg(feature = "http")]
            return Ok(Source::GitLab(GitLabProject::parse(source, gitlab_token)?));
            #[cfg(not(feature = "http"))]
            return Err(SourceError::NotBuilt(format!(
                "{}: {}",
                crate::show::shown(source),
                crate::features::not_built(crate::features::Feature::Http)
            )));
        }
        #[cfg(not(feature = "http"))]
        let _ = gitlab_token;
        let path = PathBuf::from(source);
        Ok(Source::Git(blocking(move || Repo::open(&path)).await?))
    }

    /// The commit to sync to: HEAD, or the head of the project's default branch.
    pub(crate) async fn head(&self) -> Result<String, SourceError> {
        match self {
            Source::Git(repo) => {
                let repo = repo.clone();
                Ok(blocking(move || repo.head()).await?)
            }
            #[cfg(feature = "http")]
            Source::GitLab(project) => Ok(project.head().await?),
        }
    }

    pub(crate) async fn list_files(&self, commit: &str) -> Result<Vec<String>, SourceError> {
        match self {
            Source::Git(repo) => {
                let (repo, commit) = (repo.clone(), commit.to_owned());
                Ok(blocking(move || repo.list_files(&commit)).await?)
            }
            #[cfg(feature = "http")]
            Source::GitLab(project) => Ok(project.list_files(commit).await?),
        }
    }

    pub(crate) async fn changes(&self, from: &str, to: &str) -> Result<Changes, SourceError> {
        match self {
            Source::Git(repo) => {
                let (repo, from, to) = (repo.clone(), from.to_owned(), to.to_owned());
                Ok(blocking(move || repo.changes(&from, &to)).await?)
            }
            #[cfg(feature = "http")]
            Source::GitLab(project) => Ok(project.changes(from, to).await?),
        }
    }

    /// A reader for many files at `commit`.
    pub(crate) async fn reader(&self, commit: &str) -> Result<Reader, SourceError> {
        match self {
            Source::Git(repo) => {
                let (repo, commit) = (repo.clone(), commit.to_owned());
                Ok(Reader::Git(
                    blocking(move || repo.blob_reader(&commit)).await?,
                ))
            }
            #[cfg(feature = "http")]
            Source::GitLab(project) => Ok(Reader::GitLab(project.clone(), commit.to_owned())),
        }
    }
}

/// Reads files at one commit.
#[derive(Debug)]
pub(crate) enum Reader {
    /// One `git cat-file --batch` process for the whole sync.
    Git(BlobReader),
    /// Raw-file requests, 8 at a time.
    #[cfg(feature = "http")]
    GitLab(GitLabProject, String),
}

impl Reader {
    /// Reads `paths`, each at most `max_bytes` (larger ones come back as `Blob::TooLarge`).
    pub(crate) async fn read_many(
        self,
        paths: Vec<String>,
        max_bytes: u64,
    ) -> (Self, Vec<(String, Result<Blob, SourceError>)>) {
        match self {
            Reader::Git(mut reader) => {
                blocking(move || {
                    let read = paths
                        .into_iter()
                        .map(|p| {
                            (
                                p.clone(),
                                reader.read(&p, max_bytes).map_err(SourceError::from),
                            )
                        })
                        .collect();
                    (Reader::Git(reader), read)
                })
                .await
            }
            #[cfg(feature = "http")]
            Reader::GitLab(project, commit) => {
                let read = futures_util::stream::iter(paths)
                    .map(|path| {
                        let (project, commit) = (&project, &commit);
                        async move {
                            let blob = project
                                .read(commit, &path, max_bytes)
                                .await
                                .map_err(SourceError::from);
                            (path, blob)
                        }
                    })
                    .buffered(8)
                    .collect()
                    .await;
                (Reader::GitLab(project, commit), read)
            }
        }
    }
}

/// Runs blocking work (git) on Tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
