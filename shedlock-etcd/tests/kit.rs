//! The conformance kit (`shedlock-testkit`) on etcd: every case of the provider suite and of
//! the scheduler suite that does not need SQL, each on a key prefix of its own on the cluster of
//! `SHEDLOCK_ETCD_URL`. Tests are named `etcd::…`, so a run can leave the backend out by name
//! (`scripts/test` does, with `--skip etcd::`, when its server does not answer).
#![allow(missing_docs)]

mod etcd {
    shedlock_testkit::provider_suite!(in shedlock_etcd::testkit::Etcd, without sql);
    shedlock_testkit::scheduler_suite!(in shedlock_etcd::testkit::Etcd, without sql);
}
