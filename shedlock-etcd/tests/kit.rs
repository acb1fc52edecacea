//! The conformance kit (`shedlock-testkit`) on etcd: the provider suite and the scheduler suite,
//! each case on a key prefix of its own on the cluster of `SHEDLOCK_ETCD_URL`. Tests are named
//! `etcd::…`, so a run can leave the backend out by name (`scripts/test` does, with
//! `--skip etcd::`, when its server does not answer).
//!
//! Both run whole (`without sql`). etcd decides expiry by its leases, whose TTL is whole seconds
//! and at least the server's minimum (2 s with etcd's defaults): the provider says so
//! (`LockProvider::shortest_lease`), and the kit leaves out by itself what needs a lock to end
//! sooner (the cases print what they left out; docs/adr/0016-etcd-provider.md).
#![allow(missing_docs)]

mod etcd {
    shedlock_testkit::provider_suite!(in shedlock_etcd::testkit::Etcd, without sql);
    shedlock_testkit::scheduler_suite!(in shedlock_etcd::testkit::Etcd, without sql);
}
