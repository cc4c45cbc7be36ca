// Live parts of the task page, by server-sent events (no inline script: the CSP forbids it).
// #live[data-events] names the stream; progress updates in place; a change of status
// reloads the page so that its actions, input requests and history are redrawn; an "end"
// event stops listening (its data may say why: {"error": ...}, shown in place of progress).
// The stream is open only while the tab is visible: a browser allows six connections per
// host (HTTP/1.1), so hidden tabs close theirs and reconnect when shown again (the first
// event then tells the current status and progress).
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var shown = live.getAttribute("data-status");
  var url = live.getAttribute("data-events");
  var bar = document.getElementById("progress");
  var text = document.getElementById("progress-text");
  var source = null;
  var ended = false;

  function close() {
    if (source) {
      source.close();
      source = null;
    }
  }

  function open() {
    if (source || ended) { return; }
    source = new EventSource(url);
    source.onmessage = function (event) {
      var data = JSON.parse(event.data);
      if (data.progress !== null) {
        bar.value = data.progress;
        text.textContent = Math.round(data.progress) + "%" + (data.message ? " — " + data.message : "");
      }
      if (data.status !== shown) {
        ended = true;
        close();
        window.location.reload();
      }
    };
    source.addEventListener("end", function (event) {
      // The task ended, or the stream could not go on ({"error": "..."}): stop listening.
      var data = JSON.parse(event.data || "{}");
      ended = true;
      close();
      if (data.error) {
        text.textContent = "Live updates stopped: " + data.error + " (reload the page)";
      }
    });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "hidden") { close(); } else { open(); }
  });
  if (document.visibilityState !== "hidden") { open(); }
})();
