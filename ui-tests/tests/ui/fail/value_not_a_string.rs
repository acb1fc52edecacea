// `name` takes only a string literal; a duration takes a duration string or an expression of
// type `Duration`, but never another literal: a bare number has no unit.
use shedlock::scheduler_lock;

const NAME: &str = "job";

#[scheduler_lock(name = "job", lock_at_most_for = 30)]
async fn job() {}

#[scheduler_lock(name = "float", lock_at_most_for = "1m", lock_at_least_for = 0.5)]
async fn float() {}

#[scheduler_lock(name = NAME, lock_at_most_for = "1m")]
async fn named_by_a_const() {}

fn main() {}
