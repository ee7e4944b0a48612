(function () {
  var form = document.getElementById('filters');
  if (!form) { return; }
  form.hidden = false;
  var selects = form.querySelectorAll('select');
  var shown = document.getElementById('shown');
  function apply() {
    var want = {};
    selects.forEach(function (s) { want[s.name] = s.value; });
    var n = 0;
    document.querySelectorAll('article.item').forEach(function (el) {
      var ok = Object.keys(want).every(function (k) {
        var v = want[k];
        if (!v) { return true; }
        if (k === 'outcome' && v === 'problems') { return el.dataset.outcome === 'failed' || el.dataset.outcome === 'error'; }
        return el.dataset[k] === v;
      });
      el.hidden = !ok;
      if (ok) { n += 1; }
    });
    if (shown) { shown.textContent = n + ' shown'; }
  }
  selects.forEach(function (s) { s.addEventListener('change', apply); });
  apply();
  document.querySelectorAll('button.copy').forEach(function (b) {
    b.hidden = false;
    b.addEventListener('click', function () {
      var text = b.parentNode.querySelector('code').textContent;
      var done = function () { b.textContent = 'copied'; setTimeout(function () { b.textContent = 'copy'; }, 1500); };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, function () { b.textContent = 'select and copy'; });
      } else { b.textContent = 'select and copy'; }
    });
  });
})();
