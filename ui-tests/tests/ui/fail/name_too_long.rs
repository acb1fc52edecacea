use shedlock::scheduler_lock;

#[scheduler_lock(
    name = "a_lock_name_that_goes_on_and_on_well_past_the_sixty_four_byte_limit",
    lock_at_most_for = "30m"
)]
async fn job() {}

fn main() {}
