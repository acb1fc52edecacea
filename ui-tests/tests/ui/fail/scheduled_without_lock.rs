use shedlock::scheduled;

#[scheduled(cron = "0 0 * * *")]
async fn job() {}

fn main() {}
