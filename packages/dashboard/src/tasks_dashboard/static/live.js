// Live parts of the task page, by server-sent events (no inline script: the CSP forbids it).
// #live[data-events] names the stream; progress updates in place; a change of status
// reloads the page so that its actions, input requests and history are redrawn.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var shown = live.getAttribute("data-status");
  var source = new EventSource(live.getAttribute("data-events"));
  var bar = document.getElementById("progress");
  var text = document.getElementById("progress-text");
  source.onmessage = function (event) {
    var data = JSON.parse(event.data);
    if (data.progress !== null) {
      bar.value = data.progress;
      text.textContent = Math.round(data.progress) + "%" + (data.message ? " — " + data.message : "");
    }
    if (data.status !== shown) {
      source.close();
      window.location.reload();
    }
  };
  source.addEventListener("end", function () { source.close(); });
})();
