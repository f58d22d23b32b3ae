// Communicator::from_env: join the job described by the environment.
#include "braid/comm.h"
#include "braid/env.h"
#include "braid/log.h"
#include "comm/setup/bootstrap.h"
#include "comm/engine/comm_impl.h"

namespace braid {

std::shared_ptr<Communicator> Communicator::from_env(const CommOptions& opt) {
  auto timeout = opt.timeout.count() > 0 ? opt.timeout : default_timeout();
  comm::JobEnv job = comm::bootstrap_from_env(timeout);
  CommOptions o = opt;
  if (o.secret.empty()) o.secret = job.secret;
  log_set_rank(job.rank);
  install_flight_recorder_signal();  // SIGUSR1 dumps what each communicator was doing
  auto impl = std::make_unique<comm::CommImpl>(job.rank, job.size, job.store, "braid/", o,
                                               comm::CommImpl::Role::kUser, nullptr, job.server);
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

}  // namespace braid
