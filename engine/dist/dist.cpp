// engine/dist/dist.cpp: process model and channel; MPI behind SHARDLAB_WITH_MPI (the only
// includer of mpi.h).
#include "engine/dist/dist.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/base/check.h"
#include "engine/base/clock.h"
#include "engine/dist/local_devices.h"

#if SHARDLAB_WITH_MPI
#include <mpi.h>
#endif

namespace eng::dist {

namespace {

Process g_process;
bool g_initialised = false;

// The launcher's process count, or 0 when not started by one (Open MPI, PMIx, MPICH's PMI).
int launcher_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  if (std::getenv("PMIX_RANK")) return 1;
  return 0;
}

bool g_count_given = false;  // --local-devices or SHARDLAB_LOCAL_DEVICES set the count
// Devices were listed (sl.devices()) or a Runtime made: the count is fixed from now on, as once
// JAX's backend started (XLA_FLAGS and jax_num_cpu_devices no longer change it).
std::atomic<bool> g_devices_in_use{false};

// XLA_FLAGS' device count, or 1 when it names none.
Result<int> xla_flags_setting() {
  const char* flags = std::getenv("XLA_FLAGS");
  ENG_ASSIGN_OR_RETURN(const int n, xla_flags_device_count(flags ? flags : ""));
  return n > 0 ? n : 1;
}

Result<int> local_devices_setting(int flag) {
  g_count_given = true;
  if (flag > 0) return flag;
  const char* env = std::getenv("SHARDLAB_LOCAL_DEVICES");
  g_count_given = env && *env;
  if (!env || !*env) return xla_flags_setting();
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096)
    return invalid_argument("dist: SHARDLAB_LOCAL_DEVICES={} is not a device count in [1, 4096]",
                            env);
  return static_cast<int>(n);
}

}  // namespace

bool built_with_mpi() { return SHARDLAB_WITH_MPI != 0; }

Result<int> xla_flags_device_count(std::string_view flags) {
  constexpr std::string_view kFlag = "--xla_force_host_platform_device_count=";
  int n = 0;
  for (size_t at = flags.find(kFlag); at != std::string_view::npos;
       at = flags.find(kFlag, at + 1)) {  // the last one counts, as for XLA's flag parser
    const std::string_view rest = flags.substr(at + kFlag.size());
    const std::string value(rest.substr(0, rest.find_first_of(" \t")));
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 1 || v > 4096)
      return invalid_argument(
          "dist: XLA_FLAGS has {}{}, which is not a device count in [1, 4096]", kFlag, value);
    n = static_cast<int>(v);
  }
  return n;
}

Status devices_from_xla_flags() {
  if (g_count_given || g_devices_in_use.load() || g_process.count > 1) return ok_status();
  const char* flags = std::getenv("XLA_FLAGS");
  ENG_ASSIGN_OR_RETURN(const int n, xla_flags_device_count(flags ? flags : ""));
  if (n > 0) g_process.local_devices = n;  // flags naming no count change nothing
  return ok_status();
}


const Process& process() { return g_process; }

void note_devices_in_use() { g_devices_in_use.store(true); }
bool devices_in_use() { return g_devices_in_use.load(); }

Status set_local_devices(int64_t n) {
  if (devices_in_use())
    return failed_precondition("devices are in use (it has {} local devices)",
                               g_process.local_devices);
  if (n < 1 || n > 4096)
    return invalid_argument("{} is not a device count in [1, 4096]", n);
  g_process.local_devices = static_cast<int>(n);
  g_count_given = true;  // as JAX's config option, it wins over XLA_FLAGS set afterwards
  return ok_status();
}

Result<DeviceRange> device_range(int64_t num_devices) {
  const int64_t P = g_process.count;
  if (num_devices % P != 0)
    return invalid_argument(
        "dist: a mesh of {} devices cannot be split over {} processes ({} is not a multiple of "
        "{}); use a mesh of {} x (devices per process) devices",
        num_devices, P, num_devices, P, P);
  const int64_t per = num_devices / P;
  return DeviceRange{g_process.index * per, (g_process.index + 1) * per};
}

int process_of_device(int64_t device, int64_t num_devices) {
  return static_cast<int>(device / (num_devices / g_process.count));
}

MessageHeader MessageHeader::labelled(std::string_view what) {
  MessageHeader h;
  what.copy(h.what, sizeof h.what - 1);
  return h;
}

bool MessageHeader::operator==(const MessageHeader& o) const {
  return program == o.program && instr == o.instr && execution == o.execution &&
         std::strncmp(what, o.what, sizeof what) == 0;
}

std::string MessageHeader::to_string() const {
  const std::string_view w(what, strnlen(what, sizeof what));
  if (program == 0) return std::string(w);
  return fmt::format("instruction {} ({}) of program {:016x}, execution {}", instr, w, program,
                     execution);
}

#if SHARDLAB_WITH_MPI

namespace {

// Seconds a collective may wait for its peers before the job is aborted naming them
// (SHARDLAB_COLLECTIVE_TIMEOUT; default 300: a slow step on a busy machine is not a fault).
double collective_timeout_s() {
  const char* env = std::getenv("SHARDLAB_COLLECTIVE_TIMEOUT");
  const double v = env ? std::atof(env) : 0;
  return v > 0 ? v : 300.0;
}

// Whether process `peer` finished the current REPL line (end_line's notice is waiting).
bool peer_finished_line(int peer);

// How each other process's script ended (end_job's notices), received as they arrive.
struct EndNotice {
  bool received = false;
  std::string error;  // "" = it ended fine
};
std::vector<EndNotice> g_end_notices;
// Receives every end_job notice that has arrived, without waiting.
void receive_end_notices();

// Two duplicates of MPI_COMM_WORLD whose errors return, made by init (where every process is
// at once): the one every channel sends on, and the REPL's lockstep messages (a line's
// broadcast, end_line's notices), kept apart so neither matches the other's messages.
MPI_Comm g_channel_comm = MPI_COMM_NULL;
MPI_Comm g_lockstep_comm = MPI_COMM_NULL;
MPI_Comm dup_world() {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return c;
}
// Whether a call on the channel communicator diverged (then its queues hold unmatched
// messages: every later call fails).
Status g_diverged;

class MpiChannel final : public Channel {
 public:
  static constexpr int kPayloadTag = 0, kHeaderTag = 1;

  MpiChannel() : comm_(g_channel_comm) {
    const size_t P = static_cast<size_t>(g_process.count);
    requests_.resize(4 * P);
    pending_peer_.resize(requests_.size());
    theirs_.resize(P);
    gather_send_.resize(P);
    gather_recv_.resize(P);
    timeout_s_ = collective_timeout_s();
  }

  Status exchange(const MessageHeader& header, std::span<const std::span<const char>> send,
                  std::span<const std::span<char>> recv) override {
    ENG_RETURN_IF_ERROR(g_diverged);
    header_ = header;
    int n = 0;
    for (bool receive : {true, false})
      for (int q = 0; q < g_process.count; ++q) {
        if (q == g_process.index || (send[q].empty() && recv[q].empty())) continue;
        pending_peer_[n] = q;
        const int e = receive ? MPI_Irecv(&theirs_[q], sizeof(MessageHeader), MPI_BYTE, q,
                                          kHeaderTag, comm_, &requests_[n++])
                              : MPI_Isend(&header_, sizeof(MessageHeader), MPI_BYTE, q,
                                          kHeaderTag, comm_, &requests_[n++]);
        if (e) return mpi_error(receive ? "receive a header from process" : "send a header to process", q, e);
      }
    const int headers = n;
    ENG_RETURN_IF_ERROR(post_payload(send, recv, n));
    ENG_RETURN_IF_ERROR(wait(0, headers));
    for (int i = 0; i < headers; ++i) {
      const int q = pending_peer_[i];
      if (theirs_[q] == header_) continue;
      g_diverged = failed_precondition(
          "dist: process {} and process {} diverged: process {} runs {}; process {} runs {}. Every "
          "process must make the same calls in the same order (the same script, the same "
          "branches); the job must restart",
          g_process.index, q, g_process.index, header_.to_string(), q, theirs_[q].to_string());
      abandon(headers, n);
      return g_diverged;
    }
    return wait(headers, n);
  }

  // Every peer gets `mine`, by the same headed messages as exchange().
  Status all_gather(const MessageHeader& header, const void* mine, int64_t bytes,
                    void* all) override {
    ENG_CHECK(bytes < (int64_t{1} << 31), "dist: all_gather of {} bytes", bytes);
    char* out = static_cast<char*>(all);
    for (int q = 0; q < g_process.count; ++q) {
      const bool me = q == g_process.index;
      gather_send_[q] = me ? std::span<const char>() : std::span(static_cast<const char*>(mine), size_t(bytes));
      gather_recv_[q] = me ? std::span<char>() : std::span(out + q * bytes, size_t(bytes));
    }
    if (bytes > 0) std::memcpy(out + g_process.index * bytes, mine, static_cast<size_t>(bytes));
    return exchange(header, gather_send_, gather_recv_);
  }

  int64_t bytes_sent() const override { return sent_; }
  int64_t bytes_received() const override { return received_; }

 private:
  // Posts the payload receives and sends after the n requests already posted.
  Status post_payload(std::span<const std::span<const char>> send,
                      std::span<const std::span<char>> recv, int& n) {
    for (int q = 0; q < g_process.count; ++q) {
      if (recv[q].empty()) continue;
      pending_peer_[n] = q;
      if (int e = MPI_Irecv(recv[q].data(), static_cast<int>(recv[q].size()), MPI_BYTE, q,
                            kPayloadTag, comm_, &requests_[n++]))
        return mpi_error("receive from process", q, e);
      received_ += static_cast<int64_t>(recv[q].size());
    }
    receive_end_ = n;
    for (int q = 0; q < g_process.count; ++q) {
      if (send[q].empty()) continue;
      pending_peer_[n] = q;
      if (int e = MPI_Isend(send[q].data(), static_cast<int>(send[q].size()), MPI_BYTE, q,
                            kPayloadTag, comm_, &requests_[n++]))
        return mpi_error("send to process", q, e);
      sent_ += static_cast<int64_t>(send[q].size());
    }
    return ok_status();
  }

  // After a divergence: cancels the payload receives still posted and lets go of the sends.
  void abandon(int first, int n) {
    for (int i = first; i < n; ++i) {
      if (request_done(i)) continue;  // also a null request
      if (i < receive_end_) MPI_Cancel(&requests_[i]);
      MPI_Request_free(&requests_[i]);
    }
  }

  // Polls requests [first, n); a peer silent for timeout_s_ ends the job with its rank named (a
  // killed rank is normally reported by mpirun first, within a second). Busy-polls (yielding
  // now and then) for the first kSpinS: most waits are short, and on a loaded machine a
  // sleeper or a yielder per poll waits for a scheduler slot (tests/mpi ran 1.5x slower
  // so); then sleeps between polls, so a long wait for a straggler takes no core.
  Status wait(int first, int n) {
    constexpr double kSpinS = 0.05;
    const double t0 = now_seconds();
    double diverged_at = -1;
    for (int64_t spin = 0;; ++spin) {
      int done = 0;
      if (int e = MPI_Testall(n - first, requests_.data() + first, &done, MPI_STATUSES_IGNORE))
        return mpi_error("wait for process", -1, e);
      if (done) return ok_status();
      if ((spin & 1023) != 1023) continue;
      const double waited = now_seconds() - t0;
      if (waited < kSpinS) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (waited > timeout_s_) abort_job(timeout_message(first, n));
      if ((spin & 65535) == 65535) {
        ENG_RETURN_IF_ERROR(check_peer_failed(first, n));
        check_lockstep(first, n, waited, &diverged_at);
      }
    }
  }

  // A process whose script failed (its end_job notice is here) will make no more calls: this
  // one fails too, naming that process and its error (after it every call fails: the job is
  // over).
  Status check_peer_failed(int first, int n) {
    receive_end_notices();
    for (int q = 0; q < g_process.count; ++q) {
      const EndNotice& e = g_end_notices[q];
      if (!e.received || e.error.empty()) continue;
      g_diverged = failed_precondition(
          "dist: process {} ended with an error while process {} waited for it in {}: {}",
          q, g_process.index, header_.to_string(), e.error);
      abandon(first, n);
      return g_diverged;
    }
    return ok_status();
  }

  // A peer this wait still needs (a request of [first, n) not done) that finished the current
  // REPL line (for 2 s more: its last messages may still be on their way) made fewer
  // collective calls in the line: the processes diverged. A finished process this wait does
  // not need (another axis group's) says nothing.
  void check_lockstep(int first, int n, double waited, double* diverged_at) {
    int peer = -1;
    for (int i = first; i < n && peer < 0; ++i)
      if (!request_done(i) && (peer_finished_line(pending_peer_[i]) ||
                               g_end_notices[pending_peer_[i]].received))
        peer = pending_peer_[i];
    if (peer < 0) return;
    if (*diverged_at < 0) *diverged_at = waited;
    if (waited - *diverged_at < 2.0) return;
    abort_job(fmt::format(
        "shardlab: process {}: a collective of this line waits for process {}, which finished "
        "the line without it: the processes made different calls (every line must make the "
        "same collective calls, e.g. t:step(), on every process); ending the job",
        g_process.index, peer));
  }

  std::string timeout_message(int first, int n) {
    std::string peers;
    for (int i = first; i < n; ++i)
      if (!request_done(i)) peers += fmt::format("{}{}", peers.empty() ? "" : ", ", pending_peer_[i]);
    return fmt::format(
        "shardlab: process {}: a collective waited {:.0f} s for process(es) {} "
        "in {} (SHARDLAB_COLLECTIVE_TIMEOUT); ending the job",
        g_process.index, timeout_s_, peers, header_.to_string());
  }

  bool request_done(int i) {
    int done = 0;
    MPI_Test(&requests_[i], &done, MPI_STATUS_IGNORE);
    return done != 0;
  }

  static Status mpi_error(const char* what, int peer, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return Status(Code::kInternal,
                  peer >= 0 ? fmt::format("dist: {} {}: {}", what, peer, std::string_view(text, len))
                            : fmt::format("dist: {}: {}", what, std::string_view(text, len)));
  }

  MPI_Comm comm_;                      // g_channel_comm, shared by every channel
  std::vector<MPI_Request> requests_;  // per peer: header receive and send, payload receive and send
  std::vector<int> pending_peer_;      // the peer of each request
  MessageHeader header_;               // this process's header of the exchange in progress
  std::vector<MessageHeader> theirs_;  // per peer: the header it sent
  std::vector<std::span<const char>> gather_send_;  // all_gather's messages, sized once
  std::vector<std::span<char>> gather_recv_;
  int receive_end_ = 0;                // requests [headers, receive_end_) are payload receives
  double timeout_s_ = 300;
  int64_t sent_ = 0, received_ = 0;
};

}  // namespace

Status init(int* argc, char*** argv, int local_devices) {
  ENG_CHECK(!g_initialised, "dist::init called twice");
  g_initialised = true;
  ENG_ASSIGN_OR_RETURN(g_process.local_devices, local_devices_setting(local_devices));
  if (launcher_size() == 0) return ok_status();
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  g_process.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_process.index);
  MPI_Comm_size(MPI_COMM_WORLD, &g_process.count);
  g_channel_comm = dup_world();  // collective: made here, where every process is
  g_lockstep_comm = dup_world();
  g_end_notices.resize(static_cast<size_t>(g_process.count));
  // The trainer's dispatcher thread runs the collectives, the main thread fetches: one at a time.
  if (provided < MPI_THREAD_SERIALIZED)
    return failed_precondition(
        "dist: MPI provides thread level {}, shardlab needs MPI_THREAD_SERIALIZED ({})", provided,
        static_cast<int>(MPI_THREAD_SERIALIZED));
  return ok_status();
}

void finalize() {
  if (g_process.mpi) MPI_Finalize();
  g_process.mpi = false;
}

void abort_job(const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  std::fflush(stderr);
  if (g_process.mpi) MPI_Abort(MPI_COMM_WORLD, 70);
}

std::unique_ptr<Channel> make_channel() {
  if (!g_process.mpi || g_process.count == 1) return nullptr;
  return std::make_unique<MpiChannel>();
}

namespace {
// Polls req until it completes: yields for the first 50 ms, then sleeps 1 ms between polls.
Status wait_patiently(MPI_Request* req) {
  const double t0 = now_seconds();
  for (;;) {
    int done = 0;
    if (int e = MPI_Test(req, &done, MPI_STATUS_IGNORE))
      return Status(Code::kInternal, fmt::format("dist: broadcast failed (MPI error {})", e));
    if (done) return ok_status();
    if (now_seconds() - t0 < 0.05) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

constexpr int kLineDoneTag = 1;
constexpr int kEndTag = 2;  // end_job's notices: 'K' (fine) or 'E' + the error

// Called by a collective's wait (the dispatcher thread; the main thread is waiting for the
// step, so MPI stays serialized): a notice of end_line not yet drained.
bool peer_finished_line(int peer) {
  int flag = 0;
  return MPI_Iprobe(peer, kLineDoneTag, g_lockstep_comm, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
         flag != 0;
}
}  // namespace

Status broadcast_from_first(int* code, std::string* text) {
  if (!g_process.mpi || g_process.count == 1) return ok_status();
  const MPI_Comm comm = g_lockstep_comm;
  int64_t head[2] = {*code, static_cast<int64_t>(text->size())};
  MPI_Request req;
  MPI_Ibcast(head, 2, MPI_INT64_T, 0, comm, &req);
  ENG_RETURN_IF_ERROR(wait_patiently(&req));
  ENG_CHECK(head[1] >= 0 && head[1] < (int64_t{1} << 31), "dist: broadcast of {} bytes", head[1]);
  *code = static_cast<int>(head[0]);
  text->resize(static_cast<size_t>(head[1]));
  if (head[1] == 0) return ok_status();
  MPI_Ibcast(text->data(), static_cast<int>(head[1]), MPI_CHAR, 0, comm, &req);
  return wait_patiently(&req);
}

Status all_gather_text(const std::string& mine, std::vector<std::string>* all) {
  if (!g_process.mpi || g_process.count == 1) {
    *all = {mine};
    return ok_status();
  }
  const MPI_Comm comm = g_lockstep_comm;
  const int P = g_process.count;
  ENG_CHECK(mine.size() < (size_t{1} << 30), "dist: all_gather_text of {} bytes", mine.size());
  int size = static_cast<int>(mine.size());
  std::vector<int> sizes(P), offsets(P);
  MPI_Request req;
  MPI_Iallgather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm, &req);
  ENG_RETURN_IF_ERROR(wait_patiently(&req));
  int64_t total = 0;
  for (int q = 0; q < P; ++q) {
    offsets[q] = static_cast<int>(total);
    total += sizes[q];
  }
  ENG_CHECK(total < (int64_t{1} << 31), "dist: all_gather_text of {} bytes", total);
  std::string joined(static_cast<size_t>(total), '\0');
  MPI_Iallgatherv(mine.data(), size, MPI_CHAR, joined.data(), sizes.data(), offsets.data(),
                  MPI_CHAR, comm, &req);
  ENG_RETURN_IF_ERROR(wait_patiently(&req));
  all->clear();
  for (int q = 0; q < P; ++q) all->push_back(joined.substr(offsets[q], sizes[q]));
  return ok_status();
}

namespace {
void receive_end_notices() {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kEndTag, g_lockstep_comm, &flag, &st) != MPI_SUCCESS || !flag)
      return;
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string text(static_cast<size_t>(std::max(n, 0)), '\0');
    MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, kEndTag, g_lockstep_comm, MPI_STATUS_IGNORE);
    EndNotice& e = g_end_notices[static_cast<size_t>(st.MPI_SOURCE)];
    e.received = true;
    e.error = text.empty() || text[0] != 'E' ? "" : text.substr(1);
  }
}
}  // namespace

Status end_job(const std::string& error) {
  if (!g_process.mpi || g_process.count == 1) return ok_status();
  const int P = g_process.count;
  const std::string mine = (error.empty() ? "K" : "E") + error;
  std::vector<MPI_Request> sends;
  for (int q = 0; q < P; ++q) {
    if (q == g_process.index) continue;
    sends.emplace_back();
    MPI_Isend(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, q, kEndTag, g_lockstep_comm,
              &sends.back());
  }
  const double t0 = now_seconds();
  for (;;) {
    receive_end_notices();
    std::string running;
    for (int q = 0; q < P; ++q)
      if (q != g_process.index && !g_end_notices[q].received)
        running += fmt::format("{}{}", running.empty() ? "" : ", ", q);
    if (running.empty()) break;
    if (!error.empty() && now_seconds() - t0 > kEndGraceSeconds)
      abort_job(fmt::format(
          "shardlab: process {}: ending the job: process(es) {} still running {:.0f} s after "
          "this process's error: {}",
          g_process.index, running, kEndGraceSeconds, error));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  if (!error.empty()) return ok_status();  // this process's own error is already reported
  for (int q = 0; q < P; ++q)
    if (!g_end_notices[q].error.empty())
      return failed_precondition("process {}: process {} ended with an error: {}",
                                 g_process.index, q, g_end_notices[q].error);
  return ok_status();
}

Status end_line(const std::string& mine, std::vector<std::string>* all) {
  if (!g_process.mpi || g_process.count == 1) return all_gather_text(mine, all);
  const MPI_Comm comm = g_lockstep_comm;
  const int P = g_process.count;
  int token = 1;
  std::vector<MPI_Request> sends;
  for (int q = 0; q < P; ++q) {
    if (q == g_process.index) continue;
    sends.emplace_back();
    MPI_Isend(&token, 1, MPI_INT, q, kLineDoneTag, comm, &sends.back());
  }
  ENG_RETURN_IF_ERROR(all_gather_text(mine, all));
  // Every process has posted its notices (it entered the gather after them): drain them, so
  // the next line starts with none.
  for (int q = 0; q < P; ++q) {
    if (q == g_process.index) continue;
    int got = 0;
    MPI_Recv(&got, 1, MPI_INT, q, kLineDoneTag, comm, MPI_STATUS_IGNORE);
  }
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  return ok_status();
}

#else  // without MPI

Status init(int*, char***, int local_devices) {
  ENG_CHECK(!g_initialised, "dist::init called twice");
  g_initialised = true;
  ENG_ASSIGN_OR_RETURN(g_process.local_devices, local_devices_setting(local_devices));
  if (const int n = launcher_size(); n > 1)
    return failed_precondition(
        "dist: started by an MPI launcher as one of {} processes, but this shardlab was built "
        "without MPI (configure with -DSHARDLAB_MPI=ON and libopenmpi-dev installed); every "
        "process would train alone",
        n);
  return ok_status();
}

void finalize() {}

void abort_job(const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  std::fflush(stderr);
}

std::unique_ptr<Channel> make_channel() { return nullptr; }

Status broadcast_from_first(int*, std::string*) { return ok_status(); }

Status all_gather_text(const std::string& mine, std::vector<std::string>* all) {
  *all = {mine};
  return ok_status();
}

Status end_line(const std::string& mine, std::vector<std::string>* all) {
  return all_gather_text(mine, all);
}

Status end_job(const std::string&) { return ok_status(); }

#endif

}  // namespace eng::dist
