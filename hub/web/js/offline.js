// The offline shell (served by sw.js when the hub cannot be reached): look for the hub
// every few seconds, with a growing pause, and open the inbox once it answers.

const status = document.getElementById("offline-status");
let pause = 1000;

async function look() {
  try {
    const res = await fetch("/healthz", { cache: "no-store" });
    if (res.ok) {
      location.replace("/" + location.hash);
      return;
    }
  } catch {
    // still offline
  }
  pause = Math.min(pause * 2, 30000);
  status.dataset.retryIn = String(pause);
  setTimeout(look, pause);
}

window.addEventListener("online", () => look());
setTimeout(look, pause);
