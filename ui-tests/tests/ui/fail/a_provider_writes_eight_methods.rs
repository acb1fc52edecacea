// What a provider writes: the methods of the provider traits that have no default. An empty
// implementation is refused with each named, eight in all (docs/writing-a-provider.md counts
// them; examples/memory_provider.rs implements exactly these). A method that gains a default,
// or a new one without, changes this file's .stderr.
use shedlock::lease::Lease;
use shedlock::{LockAdmin, LockProvider};

#[derive(Debug)]
struct Nothing;

impl LockProvider for Nothing {}

impl Lease for Nothing {}

impl LockAdmin for Nothing {}

fn main() {}
